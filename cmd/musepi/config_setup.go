package main

import (
	"github.com/musepi/musepi"
	"github.com/musepi/musepi/config"
)

// openConfig starts the runtime a configuration file describes; sessions
// use its default model.
func openConfig(path string, opts []musepi.Option) (*setup, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	rt, err := cfg.NewRuntime(opts...)
	if err != nil {
		return nil, err
	}
	return &setup{rt: rt, model: cfg.DefaultModel, shutdown: rt.Shutdown}, nil
}

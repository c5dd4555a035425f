package main

import (
	"errors"

	"github.com/musepi/musepi"
)

// openConfig starts the runtime a configuration file describes.
func openConfig(path string, opts []musepi.Option) (*setup, error) {
	return nil, errors.New("TEMPORARY: config loading lands with the config package")
}

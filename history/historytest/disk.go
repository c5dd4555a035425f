// Package historytest injects file-system faults under a history.FileStore:
// a disk that fills up after a set number of bytes, and fsync failures.
package historytest

import (
	"io/fs"
	"os"
	"sync"
	"syscall"

	"github.com/musepi/musepi/history"
)

// Disk opens real files whose writes fail like a full disk once Room
// bytes have been written across all of them (then the write puts the
// bytes that fit and returns ENOSPC, as write(2) does). Use Open with
// history.WithOpenFile.
type Disk struct {
	mu       sync.Mutex
	room     int64 // -1: unlimited
	syncErr  error
	failures int
}

// NewDisk returns a disk with unlimited room.
func NewDisk() *Disk { return &Disk{room: -1} }

// SetRoom lets n more bytes be written (-1: unlimited).
func (d *Disk) SetRoom(n int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.room = n
}

// FailSync makes every fsync return err (nil: succeed again).
func (d *Disk) FailSync(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.syncErr = err
}

// Failures counts the writes and syncs that failed.
func (d *Disk) Failures() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failures
}

// Open opens a real file on this disk.
func (d *Disk) Open(name string, flag int, perm fs.FileMode) (history.File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &file{File: f, disk: d}, nil
}

// take reserves up to n bytes and reports how many fit.
func (d *Disk) take(n int) (int, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.room < 0 || int64(n) <= d.room {
		if d.room >= 0 {
			d.room -= int64(n)
		}
		return n, true
	}
	fit := int(d.room)
	d.room = 0
	d.failures++
	return fit, false
}

type file struct {
	*os.File
	disk *Disk
}

func (f *file) WriteAt(b []byte, off int64) (int, error) {
	fit, ok := f.disk.take(len(b))
	n, err := f.File.WriteAt(b[:fit], off)
	if err == nil && !ok {
		err = &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
	return n, err
}

func (f *file) Sync() error {
	f.disk.mu.Lock()
	err := f.disk.syncErr
	if err != nil {
		f.disk.failures++
	}
	f.disk.mu.Unlock()
	if err != nil {
		return &fs.PathError{Op: "sync", Path: f.Name(), Err: err}
	}
	return f.File.Sync()
}

//go:build !linux

package app

import "github.com/abi-engine/engine/ports"

// withTestHooks has no hook where a process cannot stop itself.
func withTestHooks(kv ports.KeyValue) ports.KeyValue { return kv }

// withObjectTestHooks has no hook where a process cannot stop itself.
func withObjectTestHooks(objects ports.ObjectStorage) ports.ObjectStorage { return objects }

package storage

import (
	"log/slog"
	"reflect"
	"testing"
)

// Every registered adapter whose Config has a Logger takes the engine's
// through SetLogger: one without it would log on slog.Default(), without
// the engine's instance id, and nothing else would tell.
func TestEveryConfigWithALoggerTakesTheEngines(t *testing.T) {
	mu.RLock()
	defer mu.RUnlock()
	setter := reflect.TypeFor[LoggerSetter]()
	for k, e := range registry {
		f, ok := e.config.FieldByName("Logger")
		if ok && f.Type == reflect.TypeFor[*slog.Logger]() && !reflect.PointerTo(e.config).Implements(setter) {
			t.Errorf("%s adapter %q: %v has a Logger, and *%v no SetLogger", k.service, k.adapter, e.config, e.config)
		}
	}
}

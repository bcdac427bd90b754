// Command engine-redis is the engine command with one more keyvalue
// adapter, on Redis: a team's own engine, in full. With it, engine.yaml
// may say
//
//	services:
//	  keyvalue: {adapter: redis, config: {addr: "redis:6379", password: "${REDIS_PASSWORD}"}}
//
// and every command (serve, kv, config check, ...) works as with cmd/engine.
package main

import (
	"github.com/abi-engine/engine/adapters/secondary/storage"
	"github.com/abi-engine/engine/enginecmd"
	"github.com/abi-engine/engine/ports"

	rediskv "github.com/abi-engine/engine/examples/redis-keyvalue"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	storage.Register(ports.ServiceKeyValue, "redis", rediskv.Open)
	enginecmd.Main(enginecmd.Options{Version: version})
}

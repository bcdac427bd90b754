// Command engine runs an abi-engine and talks to one; `engine help` lists
// its commands. It is the engine command of package enginecmd with the
// built-in adapters only: a team's own engine is a main like this one that
// registers its adapters and modules first.
package main

import "github.com/abi-engine/engine/enginecmd"

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { enginecmd.Main(enginecmd.Options{Version: version}) }

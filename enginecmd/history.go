package enginecmd

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/ports"
)

// historyCommand: `engine history` prints the activity log, newest first:
// every engine's ownership events, on shared backends every deploy's.
func (c *command) historyCommand(args []string, stdout, stderr io.Writer) int {
	fs, cf := newFlags("history", "history [flags]", true, true)
	limit := fs.Int("limit", 100, "print at most this many entries")
	if _, code, ok := parseArgs(fs, cf, args, stderr, 0, 0); !ok {
		return code
	}
	if *limit <= 0 {
		fmt.Fprintf(stderr, "engine history: --limit is %d, want 1 or more\n", *limit)
		return exitUsage
	}
	return c.withEngine(cf, stderr, ports.ServiceDocument, func(ctx context.Context, svc app.Services) error {
		stdout := interruptibleWriter(ctx, stdout)
		docs, err := documents(svc)
		if err != nil {
			return err
		}
		entries, err := app.History(ctx, docs, *limit)
		if err != nil {
			return err
		}
		if cf.json() {
			if entries == nil {
				entries = []app.ActivityEntry{}
			}
			return writeJSON(stdout, map[string][]app.ActivityEntry{"entries": entries})
		}
		for _, e := range entries {
			at := e.Time
			if t, err := time.Parse(time.RFC3339Nano, e.Time); err == nil {
				at = t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
			}
			rollout := e.Rollout
			if rollout == "" {
				rollout = "none"
			}
			if _, err := fmt.Fprintf(stdout, "%s  %-17s  engine %s on host %s (pid %d, version %s, rollout %s, revision %d): %s\n",
				lineSafe(at), lineSafe(e.Event), lineSafe(e.InstanceID), lineSafe(e.Host), e.PID, lineSafe(e.Version), lineSafe(rollout), e.Revision, textSafe(e.Detail)); err != nil {
				return err
			}
		}
		return nil
	})
}

package enginecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

const kvUsage = "usage: engine kv get|set|del|ls [flags]\n"

// kvCommand: `engine kv get|set|del|ls` on the keyvalue service.
func (c *command) kvCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, kvUsage)
		return exitUsage
	}
	switch args[0] {
	case "get":
		return c.kvGet(args[1:], stdout, stderr)
	case "set":
		return c.kvSet(args[1:], stderr)
	case "del":
		return c.kvDel(args[1:], stderr)
	case "ls":
		return c.kvList(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "engine kv: unknown command %q\n%s", args[0], kvUsage)
	return exitUsage
}

// keyValue is the service, or the error of one switched off.
func keyValue(svc app.Services) (ports.KeyValue, error) {
	if svc.KeyValue == nil {
		return nil, switchedOff(ports.ServiceKeyValue)
	}
	return svc.KeyValue, nil
}

// kvEntry is a key and its value as JSON prints them: the value as text
// when it is UTF-8, else in base64.
type kvEntry struct {
	Key         string `json:"key"`
	Value       string `json:"value,omitempty"`
	ValueBase64 []byte `json:"value_base64,omitempty"`
}

func (c *command) kvGet(args []string, stdout, stderr io.Writer) int {
	fs, cf := newFlags("kv get", "kv get KEY [flags]", true, true)
	pos, code, ok := parseArgs(fs, cf, args, stderr, 1, 1)
	if !ok {
		return code
	}
	if code, ok := checkArgs(fs, stderr, storecheck.Key("KEY", pos[0])); !ok {
		return code
	}
	key := pos[0]
	terminal := isTerminal(stdout)
	return c.withEngine(cf, stderr, ports.ServiceKeyValue, func(ctx context.Context, svc app.Services) error {
		stdout := interruptibleWriter(ctx, stdout)
		kv, err := keyValue(svc)
		if err != nil {
			return err
		}
		v, err := kv.Get(ctx, key)
		if errors.Is(err, ports.ErrNotFound) {
			return fmt.Errorf("key %q not found", key)
		}
		if err != nil {
			return err
		}
		if cf.json() {
			e := kvEntry{Key: key}
			if utf8.Valid(v) {
				e.Value = string(v)
			} else {
				e.ValueBase64 = v
			}
			return writeJSON(stdout, e)
		}
		// The value goes out as stored, so a pipe gets its exact bytes; a
		// terminal gets a line end as well.
		if terminal && (len(v) == 0 || v[len(v)-1] != '\n') {
			v = append(v, '\n')
		}
		_, err = stdout.Write(v)
		return err
	})
}

func (c *command) kvSet(args []string, stderr io.Writer) int {
	fs, cf := newFlags("kv set", "kv set KEY [VALUE|-] [flags] (no VALUE or -: read it from stdin)", true, false)
	ttl := new(time.Duration)
	fs.Func("ttl", fmt.Sprintf("time to live, such as 10m, from %v to %v (0: until deleted)", ports.MinTTL, ports.MaxTTL), func(s string) error {
		d, err := time.ParseDuration(s)
		switch {
		case err != nil:
			return fmt.Errorf("want a duration such as 10m, at most %v", ports.MaxTTL)
		// A duration below a nanosecond ("0.5ns") parses as 0, which keeps
		// the value for good: refused as the HTTP API refuses ?ttl=0.5ns.
		// One below the store's millisecond, or above its most, is refused
		// here too, as a usage error of the flag: sent, it came back from
		// the engine as an error of the wire's ttl_seconds, exit code 1.
		case d == 0 && strings.ContainsAny(s, "123456789"), d > 0 && d < ports.MinTTL:
			return fmt.Errorf("%q is below %v and would round to zero, which keeps the value forever", s, ports.MinTTL)
		case d > ports.MaxTTL:
			return fmt.Errorf("%q is more than the most, %v", s, ports.MaxTTL)
		}
		*ttl = d
		return nil
	})
	pos, code, ok := parseArgs(fs, cf, args, stderr, 1, 2)
	if !ok {
		return code
	}
	if code, ok := checkArgs(fs, stderr, storecheck.Key("KEY", pos[0])); !ok {
		return code
	}
	if *ttl < 0 {
		fmt.Fprintf(stderr, "engine kv set: --ttl is %v, want 0 or more\n", *ttl)
		return exitUsage
	}
	value, err := readInput(pos, 1)
	if err != nil {
		return fail(stderr, err)
	}
	return c.withEngine(cf, stderr, ports.ServiceKeyValue, func(ctx context.Context, svc app.Services) error {
		kv, err := keyValue(svc)
		if err != nil {
			return err
		}
		return kv.Set(ctx, pos[0], value, *ttl)
	})
}

func (c *command) kvDel(args []string, stderr io.Writer) int {
	fs, cf := newFlags("kv del", "kv del KEY [flags]", true, false)
	pos, code, ok := parseArgs(fs, cf, args, stderr, 1, 1)
	if !ok {
		return code
	}
	if code, ok := checkArgs(fs, stderr, storecheck.Key("KEY", pos[0])); !ok {
		return code
	}
	key := pos[0]
	return c.withEngine(cf, stderr, ports.ServiceKeyValue, func(ctx context.Context, svc app.Services) error {
		kv, err := keyValue(svc)
		if err != nil {
			return err
		}
		existed, err := kv.Delete(ctx, key)
		if err != nil {
			return err
		}
		if !existed {
			return fmt.Errorf("key %q not found", key)
		}
		return nil
	})
}

func (c *command) kvList(args []string, stdout, stderr io.Writer) int {
	fs, cf := newFlags("kv ls", "kv ls [PREFIX] [flags]", true, true)
	limit := fs.Int("limit", 0, "list at most this many keys (0: all)")
	pos, code, ok := parseArgs(fs, cf, args, stderr, 0, 1)
	if !ok {
		return code
	}
	if *limit < 0 {
		fmt.Fprintf(stderr, "engine kv ls: --limit is %d, want 0 or more\n", *limit)
		return exitUsage
	}
	prefix := ""
	if len(pos) == 1 {
		prefix = pos[0]
	}
	if code, ok := checkArgs(fs, stderr, storecheck.Prefix("PREFIX", prefix)); !ok {
		return code
	}
	return c.withEngine(cf, stderr, ports.ServiceKeyValue, func(ctx context.Context, svc app.Services) error {
		stdout := interruptibleWriter(ctx, stdout)
		kv, err := keyValue(svc)
		if err != nil {
			return err
		}
		keys := []string{}
		for cursor := ""; ; {
			page, next, err := kv.ListKeys(ctx, prefix, 0, cursor)
			if err != nil {
				return err
			}
			keys = append(keys, page...)
			if next == "" || *limit > 0 && len(keys) >= *limit {
				break
			}
			cursor = next
		}
		if *limit > 0 && len(keys) > *limit {
			keys = keys[:*limit]
		}
		if cf.json() {
			return writeJSON(stdout, map[string][]string{"keys": keys})
		}
		for _, k := range keys {
			if _, err := fmt.Fprintln(stdout, lineSafe(k)); err != nil {
				return err
			}
		}
		return nil
	})
}

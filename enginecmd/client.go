package enginecmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/dig"
	"go.uber.org/fx"

	"github.com/abi-engine/engine/adapters/primary/natsapi"
	lease "github.com/abi-engine/engine/adapters/secondary/lease/jetstream"
	"github.com/abi-engine/engine/adapters/secondary/natsconn"
	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/app/config"
	"github.com/abi-engine/engine/domain"
	"github.com/abi-engine/engine/internal/wire"
	"github.com/abi-engine/engine/ports"
)

// clientFlags are the flags the commands that talk to an engine share.
type clientFlags struct {
	config  string
	natsURL string
	dataDir string
	// output is "text" or "json"; only read commands have the flag.
	output string
}

// newFlags returns a command's flag set with the shared flags: --config and
// --nats-url always, --data-dir for client commands (an engine of role
// auto may serve and keep data), --output for read commands. usage is the
// synopsis after "engine".
func newFlags(name, usage string, dataDir, read bool) (*flag.FlagSet, *clientFlags) {
	fs := flag.NewFlagSet("engine "+name, flag.ContinueOnError)
	cf := &clientFlags{output: "text"}
	fs.StringVar(&cf.config, "config", "", "engine.yaml to load (none: embedded defaults)")
	fs.StringVar(&cf.natsURL, "nats-url", "", "NATS URL, overriding nats.url and NATS_URL")
	if dataDir {
		fs.StringVar(&cf.dataDir, "data-dir", "", "directory for local data when this command serves, overriding data_dir")
	}
	if read {
		fs.StringVar(&cf.output, "output", "text", "output format: text or json")
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: engine %s\n", usage)
		fs.PrintDefaults()
	}
	return fs, cf
}

// parseArgs parses flags placed anywhere among the arguments, so
// "kv get k --output json" works, and returns the positional arguments
// ("--" ends the flags). ok is false with the exit code when the command
// should stop: help asked, a bad flag, or fewer than min or more than max
// arguments.
func parseArgs(fs *flag.FlagSet, cf *clientFlags, args []string, stderr io.Writer, min, max int) (pos []string, code int, ok bool) {
	fs.SetOutput(stderr)
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK, false
			}
			return nil, exitUsage, false
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	switch {
	case len(pos) < min:
		fmt.Fprintf(stderr, "%s: missing argument\n", fs.Name())
		fs.Usage()
		return nil, exitUsage, false
	case len(pos) > max:
		fmt.Fprintf(stderr, "%s: unexpected argument %q\n", fs.Name(), pos[max])
		fs.Usage()
		return nil, exitUsage, false
	}
	if cf != nil && cf.output != "text" && cf.output != "json" {
		fmt.Fprintf(stderr, "%s: --output is %q, want text or json\n", fs.Name(), cf.output)
		return nil, exitUsage, false
	}
	return pos, exitOK, true
}

// checkArgs refuses, as a usage error of the command fs names, an argument
// every store refuses: an empty key, one not UTF-8, one with a NUL, a
// collection name out of its rule. Each check is storecheck's, so the
// argument is refused here, named, before an engine starts or a broker is
// dialled; sent, it came back from the engine with exit code 1.
func checkArgs(fs *flag.FlagSet, stderr io.Writer, checks ...error) (code int, ok bool) {
	for _, err := range checks {
		if err != nil {
			fmt.Fprintf(stderr, "%s: %s\n", fs.Name(), strings.TrimSuffix(err.Error(), ": "+ports.ErrInvalidArgument.Error()))
			return exitUsage, false
		}
	}
	return exitOK, true
}

// load reads the configuration with the flags applied.
func (cf *clientFlags) load() (*config.Config, error) {
	cfg, err := config.Load(cf.config)
	if err != nil {
		return nil, err
	}
	if cf.dataDir != "" {
		cfg.DataDir = cf.dataDir
		cfg.SetBy("data_dir", "--data-dir")
	}
	if cf.natsURL != "" {
		cfg.NATS.URL = cf.natsURL
		cfg.SetBy("nats.url", "--nats-url")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// embedded reports whether the command runs on embedded defaults: no file
// and no NATS URL, so a nats-server in the process stands in for a missing
// one, as for `engine` itself.
func (cf *clientFlags) embedded() bool {
	return cf.config == "" && cf.natsURL == "" && os.Getenv(config.EnvNATSURL) == ""
}

// json reports whether the command prints JSON.
func (cf *clientFlags) json() bool { return cf.output == "json" }

// withEngine runs f with the services of an engine started in this process
// with role auto (unless ABI_ENGINE_ROLE chooses another, or the
// configuration says client, which it keeps): next to a
// serving engine it is a client, on its own it serves until f returns. Its
// logs reach stderr only from warnings up, so stdout carries the answer
// alone. service is the one f uses: a command that serves on its own
// refuses it when its data would live in this process alone. It returns the
// exit code.
func (c *command) withEngine(cf *clientFlags, stderr io.Writer, service string, f func(ctx context.Context, svc app.Services) error) int {
	// SIGHUP as SIGTERM: a command on its own serves, and a closed
	// terminal must not kill it holding the lease. The first signal ends
	// the command's work, or its start, and lets the engine stop as it
	// does after the work: release the lease, then wait for what it
	// received. A second one, like any signal once that stop has begun,
	// ends the process at once with exit code 1, as for serve: an operator
	// who signals again does not want to wait out drain_seconds.
	// signal.NotifyContext kept every signal after the first from the
	// process, so the command could not be stopped before its drain ended.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, stopSignals()...)
	defer signal.Stop(signals)
	ctx, cancelRun := context.WithCancelCause(context.Background())
	defer cancelRun(nil)
	var stopping atomic.Bool
	code := make(chan int, 1)
	go func() {
		// The engine that serves may be another command's, serving for its
		// own length: it may stop between this command's choice to be its
		// client and the call, and the call then finds no engine at all.
		// A command that chose to be a client, and whose work failed as
		// unavailable, having done nothing, chooses again, and serves
		// itself if no engine does.
		for attempt := 1; ; attempt++ {
			n, again := c.runOnce(ctx, cf, stderr, service, &stopping, attempt < clientAttempts, f)
			if !again {
				code <- n
				return
			}
		}
	}()
	interrupted := false
	for {
		select {
		case n := <-code:
			return n
		case sig := <-signals:
			if stopping.Load() {
				interrupted = true
			}
			if !interrupted {
				interrupted = true
				cancelRun(interruptedBy(sig))
				continue
			}
			fmt.Fprintf(stderr, "engine: another signal (%v) while stopping; exiting without waiting for the stop to finish\n", sig)
			return exitError
		}
	}
}

// clientAttempts is how many times a command that chose to be a client
// runs its work before it reports an engine unavailable.
const clientAttempts = 3

// runOnce loads the configuration, chooses the command's role, and runs f
// in an engine of that role. again is true, with nothing reported, when
// retry is set and f failed as a client by choice, no engine answering, in
// a way that did nothing: the command should choose anew.
func (c *command) runOnce(ctx context.Context, cf *clientFlags, stderr io.Writer, service string, stopping *atomic.Bool, retry bool, f func(ctx context.Context, svc app.Services) error) (code int, again bool) {
	cfg, err := cf.load()
	if err != nil {
		return fail(stderr, err), false
	}
	// A command on a service its configuration switches off has nothing to
	// call: its engine, started, would reach the broker, claim the lease
	// and open the other services' stores only for the command to fail.
	if !app.Offers(cfg, service) {
		return fail(stderr, switchedOff(service)), false
	}
	// A host configured as a client never serves, not even for one
	// command: it would claim the lease and keep the data it wrote in
	// its own backends, where the account's engine never sees them.
	chose := os.Getenv(config.EnvRole) == "" && cfg.Role() != domain.RoleClient
	if chose {
		cfg.NATS.Engine.Role = domain.RoleAuto.String()
		if engineAnswers(cfg) {
			cfg.NATS.Engine.Role = domain.RoleClient.String()
		}
	}
	// Decided before the start, which would claim the lease and serve:
	// callers of the account would be answered, for the command's length,
	// by a store gone when it returns.
	if cfg.Role() != domain.RoleClient {
		if err := gone(cfg, service); err != nil {
			return fail(stderr, err), false
		}
	}
	// The configured HTTP address belongs to the engines that run for good,
	// and a command has no use for an API of its own: one would call the
	// services, signed with the caller secret, for whoever on this host
	// found its port, even where the configuration switches the API off.
	cfg.HTTP.Listen = config.HTTPOff
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var eng *app.Engine
	a := c.newApp(app.Options{Config: cfg, Embed: cf.embedded(), Logger: log, Transient: true}, fx.Populate(&eng))
	if err := a.Err(); err != nil {
		return fail(stderr, dig.RootCause(err)), false
	}
	return c.runEngine(ctx, cfg, a, eng, stopping, stderr, retry && chose, f)
}

// runEngine starts a, runs f with the engine's services until it returns
// or ctx ends, and stops a, setting stopping as the stop begins. A ctx that
// ends during the start ends it through the engine, not through fx's
// context: fx would return at once, and the process exit, while the engine
// still released the lease its start took (see serve). With retry set, a
// client whose f failed unavailable, untouched, stops quietly and reports
// again.
func (c *command) runEngine(ctx context.Context, cfg *config.Config, a *fx.App, eng *app.Engine, stopping *atomic.Bool, stderr io.Writer, retry bool, f func(ctx context.Context, svc app.Services) error) (code int, again bool) {
	startCtx, cancel := context.WithTimeout(context.Background(), a.StartTimeout())
	stopInterrupt := context.AfterFunc(ctx, eng.Interrupt)
	err := a.Start(startCtx)
	stopInterrupt()
	cancel()
	if err != nil {
		return fail(stderr, signalled(ctx, dig.RootCause(err))), false
	}
	runErr := f(ctx, eng.Services())
	again = retry && ctx.Err() == nil && eng.Outcome() == domain.OutcomeClient &&
		errors.Is(runErr, wire.ErrUnavailable) && !errors.As(runErr, new(touchedError))
	if !again {
		stopping.Store(true)
	}
	stopCtx, cancelStop := context.WithTimeout(context.Background(), a.StopTimeout()+StopSlack)
	defer cancelStop()
	if err := a.Stop(stopCtx); err != nil && runErr == nil {
		runErr = dig.RootCause(err)
	}
	if again {
		return 0, true
	}
	if runErr != nil {
		if ctx.Err() == nil && eng.Outcome() == domain.OutcomeClient && errors.Is(runErr, wire.ErrUnavailable) {
			runErr = unanswered(cfg, runErr)
		}
		return fail(stderr, signalled(ctx, runErr)), false
	}
	return exitOK, false
}

// unanswered adds to err, the error of a client no engine answered, the
// engine the lease names when it holds it unreleased: one that renews the
// lease but serves nothing yet, such as the first engine on an account
// while it holds the new key for a lease, or one that stopped without a
// release. "no responders" alone named no engine and no next step.
func unanswered(cfg *config.Config, err error) error {
	nc, cerr := natsconn.Connect(natsOptions(cfg, "abi-engine lease read"))
	if cerr != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, jerr := jetstream.New(nc)
	if jerr != nil {
		return err
	}
	kv, kerr := js.KeyValue(ctx, lease.DefaultBucket)
	if kerr != nil {
		return err
	}
	e, gerr := kv.Get(ctx, lease.Key)
	if gerr != nil {
		return err
	}
	h := lease.DecodeHolder(e.Value())
	if h.Released || h.InstanceID == "" {
		return err
	}
	return fmt.Errorf("%w: the lease names %s, which does not answer: it is still starting (the first engine on an account holds the new lease key for a whole lease before it serves), or it stopped without releasing the lease; `engine status` tells which", err, h)
}

// interruptedBy is the error of a command a signal ended before its work
// was done.
func interruptedBy(sig os.Signal) error {
	return fmt.Errorf("interrupted by a signal (%v) before the command finished", sig)
}

// signalled is err, or, when err is the error of ctx cancelled by a
// signal, which said only "context canceled", the signal's.
func signalled(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(err, context.Canceled) && cause != nil && cause != ctx.Err() {
		return cause
	}
	return err
}

// touchedError marks the error of work that read its input or wrote its
// output before it failed: run again, it would not do the same.
type touchedError struct{ err error }

func (e touchedError) Error() string { return e.err.Error() }
func (e touchedError) Unwrap() error { return e.err }

// gone is the error of a command that would serve service itself, no
// engine answering for the account, on an adapter whose data lives in this
// process: a value it set would be gone when it returns, though it
// reported success, and a read finds nothing whatever was set before.
func gone(cfg *config.Config, service string) error {
	built, err := app.BuildStorage(cfg)
	if err != nil {
		return err
	}
	for _, b := range built {
		d := b.Declaration
		if d.Service == service && !d.Off && d.Storage != nil && d.Storage.LocalStorage() == ports.InThisProcess {
			return fmt.Errorf("no engine serves this account, and the %s adapter %q keeps its data in this process only: "+
				"what this command wrote would be gone when it returns, and it has nothing to read; start `engine serve` and run it again", service, d.Adapter)
		}
	}
	return nil
}

// engineAnswers reports whether a serving engine answers on its info
// subject. Role auto would find it too, but only after watching the lease
// for a renewal, which comes every quarter of a lease; an answer proves at
// once that an engine serves, so the command can be a client without
// touching the lease. Anything else (no broker, no responder, no answer in
// time) leaves the decision to auto.
func engineAnswers(cfg *config.Config) bool {
	nc, err := natsconn.Connect(natsOptions(cfg, "abi-engine probe"))
	if err != nil {
		return false
	}
	defer nc.Close()
	_, err = nc.Request(wire.Subject(wire.ServiceEngine, wire.EngineInfo), []byte("{}"), 2*time.Second)
	return err == nil
}

// natsOptions are the configured broker and credentials.
func natsOptions(cfg *config.Config, name string) natsconn.Options {
	c := cfg.NATS.Credentials
	return natsconn.Options{
		URL: cfg.NATS.URL, Name: name,
		CredsFile: c.CredsFile, NkeySeedFile: c.NkeySeedFile, User: c.User, Password: c.Password,
		Token: c.Token, CA: c.TLS.CA, Cert: c.TLS.Cert, Key: c.TLS.Key,
		InboxPrefix: cfg.NATS.InboxPrefix,
	}
}

// fail reports err and returns the error exit code. Its message may carry
// text from the engine, or from a backend through it, so it is printed as
// textSafe prints text, tabs kept, one line for each error joined.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "engine: %s\n", strings.Join(messageLines(err), "\n"))
	return exitError
}

// messageLines is err's message a line for each error errors.Join joined
// into it, each escaped as textSafe escapes text, tabs kept.
func messageLines(err error) []string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var msgs, lines []string
		for _, e := range j.Unwrap() {
			if e != nil {
				msgs = append(msgs, e.Error())
				lines = append(lines, messageLines(e)...)
			}
		}
		if strings.Join(msgs, "\n") == err.Error() {
			return lines
		}
	}
	return []string{escape(err.Error(), "\t")}
}

// textSafe is text as a line of output shows it within a sentence: each
// character that is neither printable nor a space (a newline, a tab, ESC,
// a C1 control, an invisible format character), and each byte that is not
// UTF-8, written as Go writes it in a quoted string, \x1b say. Names and
// messages that came from the engine or the lease, printed raw, could
// rewrite the operator's terminal or split one line of output in two.
func textSafe(s string) string { return escape(s, "") }

// escape is textSafe keeping the characters in keep as they are.
func escape(s, keep string) string {
	raw := func(r rune) bool {
		return r != utf8.RuneError && (strconv.IsGraphic(r) || strings.ContainsRune(keep, r))
	}
	if strings.IndexFunc(s, func(r rune) bool { return !raw(r) }) < 0 {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case r == utf8.RuneError || raw(r):
			b.WriteString(s[:n])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		s = s[n:]
	}
	return b.String()
}

// switchedOff is the error of a command whose service the configuration
// switches off.
func switchedOff(service string) error {
	return fmt.Errorf("the %s service is switched off in the configuration", service)
}

// lineSafe is a key as a line of text output shows it: as it is, or, when
// it holds a character that is not printable (a newline, a tab, any
// control or invisible character) or starts with a double quote, quoted as
// Go quotes a string. Printed raw, a key with a newline read as two keys
// and one with control characters could rewrite the operator's terminal;
// quoted, one key is one line, and a line that starts with a quote is
// always a quoted key.
func lineSafe(key string) string {
	if strings.HasPrefix(key, `"`) || strings.IndexFunc(key, func(r rune) bool { return !strconv.IsPrint(r) }) >= 0 {
		return strconv.Quote(key)
	}
	return key
}

// writeJSON prints v as one indented JSON document, its unprintable
// characters escaped (jsonSafe).
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(jsonSafe(b.Bytes()))
	return err
}

// jsonSafe is encoded JSON with every character that is neither printable
// nor a space written as a \u escape. encoding/json escapes the C0
// controls only: DEL, the C1 controls (U+009B starts a terminal's control
// sequence as ESC [ does), and invisible format characters such as a
// right-to-left override reached the operator's terminal raw from a
// document or value any caller of the account wrote. Escaped, the JSON
// holds the same strings. Outside its strings encoded JSON is ASCII, so
// every such character is inside one.
func jsonSafe(b []byte) []byte {
	unsafe := func(r rune) bool { return r == 0x7f || r >= utf8.RuneSelf && !strconv.IsGraphic(r) }
	if bytes.IndexFunc(b, unsafe) < 0 {
		return b
	}
	out := make([]byte, 0, len(b)+32)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		switch {
		case !unsafe(r):
			out = append(out, b[:n]...)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		b = b[n:]
	}
	return out
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// maxInput is the most a value read from stdin may hold: the largest value
// a call carries (docs/protocol.md; an engine answers 413 beyond it).
// Reading on past it would keep in memory whatever a pipe sends, the
// endless zeros of /dev/zero included, only for the engine to refuse it.
const maxInput = natsapi.DefaultMaxOverflowValue

// readInput is the value given as an argument, or stdin when there is none
// or it is "-".
func readInput(args []string, at int) ([]byte, error) {
	if len(args) > at && args[at] != "-" {
		return []byte(args[at]), nil
	}
	b, err := io.ReadAll(io.LimitReader(os.Stdin, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	if len(b) > maxInput {
		return nil, fmt.Errorf("stdin holds more than %d MiB, the largest value a call carries: %w", maxInput>>20, ports.ErrTooLarge)
	}
	return b, nil
}

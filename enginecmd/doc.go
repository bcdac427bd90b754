package enginecmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/abi-engine/engine/app"
	"github.com/abi-engine/engine/internal/docjson"
	"github.com/abi-engine/engine/internal/strictjson"
	"github.com/abi-engine/engine/ports"
	"github.com/abi-engine/engine/storecheck"
)

const docUsage = "usage: engine doc get|put|del|find [flags]\n"

// docCommand: `engine doc get|put|del|find` on the document service.
func (c *command) docCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, docUsage)
		return exitUsage
	}
	switch args[0] {
	case "get":
		return c.docGet(args[1:], stdout, stderr)
	case "put":
		return c.docPut(args[1:], stdout, stderr)
	case "del":
		return c.docDel(args[1:], stderr)
	case "find":
		return c.docFind(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "engine doc: unknown command %q\n%s", args[0], docUsage)
	return exitUsage
}

func documents(svc app.Services) (ports.DocumentStore, error) {
	if svc.Document == nil {
		return nil, switchedOff(ports.ServiceDocument)
	}
	return svc.Document, nil
}

// docJSON is a document as JSON prints it.
type docJSON struct {
	Collection string         `json:"collection"`
	ID         string         `json:"id"`
	Version    uint64         `json:"version"`
	Data       map[string]any `json:"data"`
}

// ifVersion is the --if-version flag: unset means an unconditional write.
func ifVersion(fs *flag.FlagSet) *ports.Cond {
	cond := new(ports.Cond)
	fs.Func("if-version", "write only if the stored version is this one (0: only if the document does not exist)", func(s string) error {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return errors.New("want a version number")
		}
		*cond = ports.IfVersion(v)
		return nil
	})
	return cond
}

// jsonObject reads a JSON object, keeping numbers as written, by the
// wire's rules: no field given twice in any object, and every string and
// name UTF-8.
func jsonObject(what string, b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s is not a JSON object: %w", what, err)
	}
	if m == nil {
		return nil, fmt.Errorf("%s is not a JSON object: null", what)
	}
	if err := strictjson.Rest(dec, b); err != nil {
		return nil, fmt.Errorf("%s is not one JSON object: %v", what, err)
	}
	// The wire refuses a field given twice and text that is not UTF-8;
	// decoded here, the last of two values would win and bad bytes would
	// become U+FFFD, so the engine would store what was never written.
	if err := strictjson.ExactFields(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", what, err)
	}
	return m, nil
}

func (c *command) docGet(args []string, stdout, stderr io.Writer) int {
	fs, cf := newFlags("doc get", "doc get COLLECTION ID [flags]", true, true)
	pos, code, ok := parseArgs(fs, cf, args, stderr, 2, 2)
	if !ok {
		return code
	}
	if code, ok := checkArgs(fs, stderr, storecheck.Collection(pos[0]), storecheck.Key("ID", pos[1])); !ok {
		return code
	}
	collection, id := pos[0], pos[1]
	return c.withEngine(cf, stderr, ports.ServiceDocument, func(ctx context.Context, svc app.Services) error {
		stdout := interruptibleWriter(ctx, stdout)
		docs, err := documents(svc)
		if err != nil {
			return err
		}
		d, err := docs.Get(ctx, collection, id)
		if errors.Is(err, ports.ErrNotFound) {
			return fmt.Errorf("document %q not found in collection %q", id, collection)
		}
		if err != nil {
			return err
		}
		if cf.json() {
			return writeJSON(stdout, docJSON{Collection: collection, ID: d.ID, Version: d.Version, Data: d.Data})
		}
		if _, err := fmt.Fprintf(stdout, "# %s/%s version %d\n", collection, lineSafe(d.ID), d.Version); err != nil {
			return err
		}
		return writeJSON(stdout, d.Data)
	})
}

func (c *command) docPut(args []string, stdout, stderr io.Writer) int {
	fs, cf := newFlags("doc put", "doc put COLLECTION ID [JSON|-] [flags] (no JSON or -: read the object from stdin)", true, false)
	cond := ifVersion(fs)
	pos, code, ok := parseArgs(fs, cf, args, stderr, 2, 3)
	if !ok {
		return code
	}
	if code, ok := checkArgs(fs, stderr, storecheck.Collection(pos[0]), storecheck.Key("ID", pos[1])); !ok {
		return code
	}
	collection, id := pos[0], pos[1]
	raw, err := readInput(pos, 2)
	if err != nil {
		return fail(stderr, err)
	}
	data, err := jsonObject("the document", raw)
	if err != nil {
		fmt.Fprintf(stderr, "engine doc put: %v\n", err)
		return exitUsage
	}
	return c.withEngine(cf, stderr, ports.ServiceDocument, func(ctx context.Context, svc app.Services) error {
		docs, err := documents(svc)
		if err != nil {
			return err
		}
		// A write conditioned on a version makes no collection: no
		// document of a missing one has that version, and the collection
		// would outlive the refusal.
		v, conditioned := cond.Version()
		if !conditioned || v == 0 {
			if err := docs.EnsureCollection(ctx, collection); err != nil {
				return err
			}
		}
		d, err := docs.Put(ctx, collection, id, data, *cond)
		if errors.Is(err, ports.ErrNotFound) && conditioned && v > 0 {
			return fmt.Errorf("document %q in collection %q is not at version %d: the collection does not exist", id, collection, v)
		}
		if errors.Is(err, ports.ErrConflict) {
			return fmt.Errorf("document %q in collection %q is not at version %d: %w", id, collection, v, err)
		}
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s/%s version %d\n", collection, lineSafe(d.ID), d.Version)
		return err
	})
}

func (c *command) docDel(args []string, stderr io.Writer) int {
	fs, cf := newFlags("doc del", "doc del COLLECTION ID [flags]", true, false)
	cond := ifVersion(fs)
	pos, code, ok := parseArgs(fs, cf, args, stderr, 2, 2)
	if !ok {
		return code
	}
	if code, ok := checkArgs(fs, stderr, storecheck.Collection(pos[0]), storecheck.Key("ID", pos[1])); !ok {
		return code
	}
	collection, id := pos[0], pos[1]
	return c.withEngine(cf, stderr, ports.ServiceDocument, func(ctx context.Context, svc app.Services) error {
		docs, err := documents(svc)
		if err != nil {
			return err
		}
		err = docs.Delete(ctx, collection, id, *cond)
		switch {
		case errors.Is(err, ports.ErrNotFound):
			return fmt.Errorf("document %q not found in collection %q", id, collection)
		case errors.Is(err, ports.ErrConflict):
			v, _ := cond.Version()
			return fmt.Errorf("document %q in collection %q is not at version %d: %w", id, collection, v, err)
		}
		return err
	})
}

func (c *command) docFind(args []string, stdout, stderr io.Writer) int {
	fs, cf := newFlags("doc find", "doc find COLLECTION [flags]", true, true)
	where := fs.String("where", "", `keep documents whose top-level fields equal these, as a JSON object: '{"status":"open"}'`)
	orderBy := fs.String("order-by", "", "order by this top-level field (none: by id)")
	desc := fs.Bool("desc", false, "reverse the order")
	limit := fs.Int("limit", 100, fmt.Sprintf("page size, 1 to %d", ports.MaxPage))
	cursor := fs.String("cursor", "", "continue after a previous page")
	pos, code, ok := parseArgs(fs, cf, args, stderr, 1, 1)
	if !ok {
		return code
	}
	if code, ok := checkArgs(fs, stderr, storecheck.Collection(pos[0])); !ok {
		return code
	}
	// A page above the most a listing returns is refused here, naming the
	// flag, as one below 1 is: sent, it came back from the engine as an
	// error of the wire's limit, exit code 1.
	if *limit <= 0 || *limit > ports.MaxPage {
		fmt.Fprintf(stderr, "engine doc find: --limit is %d, want 1 to %d (--cursor reads the next page)\n", *limit, ports.MaxPage)
		return exitUsage
	}
	q := ports.Query{OrderBy: *orderBy, Desc: *desc, Limit: *limit, Cursor: *cursor}
	if *where != "" {
		m, err := jsonObject("--where", []byte(*where))
		if err != nil {
			fmt.Fprintf(stderr, "engine doc find: %v\n", err)
			return exitUsage
		}
		q.Where = m
	}
	// A field every store refuses, or more conditions than a query holds,
	// is refused here, naming the flag: sent, it came back from the engine
	// as an invalid argument, exit code 1.
	var orderErr, whereErr error
	if *orderBy != "" {
		if err := storecheck.Field(*orderBy); err != nil {
			orderErr = fmt.Errorf("--order-by: %w", err)
		}
	}
	if _, err := docjson.Conditions(q.Where); err != nil {
		whereErr = errors.New("--where: " + strings.TrimPrefix(err.Error(), "where: "))
	}
	if code, ok := checkArgs(fs, stderr, orderErr, whereErr); !ok {
		return code
	}
	collection := pos[0]
	return c.withEngine(cf, stderr, ports.ServiceDocument, func(ctx context.Context, svc app.Services) error {
		stdout := interruptibleWriter(ctx, stdout)
		docs, err := documents(svc)
		if err != nil {
			return err
		}
		found, next, err := docs.Find(ctx, collection, q)
		if errors.Is(err, ports.ErrNotFound) {
			return fmt.Errorf("collection %q not found", collection)
		}
		if err != nil {
			return err
		}
		if cf.json() {
			out := struct {
				Documents []docJSON `json:"documents"`
				Cursor    string    `json:"cursor,omitempty"`
			}{Documents: []docJSON{}, Cursor: next}
			for _, d := range found {
				out.Documents = append(out.Documents, docJSON{Collection: collection, ID: d.ID, Version: d.Version, Data: d.Data})
			}
			return writeJSON(stdout, out)
		}
		for _, d := range found {
			data, err := json.Marshal(d.Data)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(stdout, "%s\tversion %d\t%s\n", lineSafe(d.ID), d.Version, jsonSafe(data)); err != nil {
				return err
			}
		}
		if next != "" {
			fmt.Fprintf(stderr, "more documents follow: --cursor %s\n", textSafe(next))
		}
		return nil
	})
}

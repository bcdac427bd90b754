package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/abi-engine/engine/domain"
)

// The environment variables that override the file when they are not empty.
const (
	EnvRole      = "ABI_ENGINE_ROLE"
	EnvRolloutID = "ABI_ROLLOUT_ID"
	EnvNATSURL   = "NATS_URL"
)

// Error is a configuration error and where the value came from. It matches
// domain.ErrInvalidConfig and the error it wraps.
type Error struct {
	// Source is the file's name, "" when there was none.
	Source string
	// Line is the value's line in the file, 0 when it came from elsewhere.
	Line int
	// Key is the key path, such as "nats.engine.role".
	Key string
	// Env is the variable, or the command-line flag, that set the value,
	// if one did.
	Env string
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.Source != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s line %d: ", e.Source, e.Line)
	case e.Source != "":
		fmt.Fprintf(&b, "%s: ", e.Source)
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		if e.Env != "" {
			fmt.Fprintf(&b, " (from %s)", e.Env)
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() []error { return []error{domain.ErrInvalidConfig, e.Err} }

// Load reads the file at path, or uses the defaults when path is "", and
// applies the environment.
func Load(path string) (*Config, error) {
	if path == "" {
		return Parse("", nil, os.Getenv)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: read configuration: %w", domain.ErrInvalidConfig, err)
	}
	return Parse(filepath.Base(path), data, os.Getenv)
}

// Parse reads a configuration named source from data (nil or empty: the
// defaults), with getenv for "${VAR}" and the overrides.
func Parse(source string, data []byte, getenv func(string) string) (*Config, error) {
	c := Default()
	c.source = source
	c.lines = map[string]int{}
	c.fromEnv = map[string]string{}
	c.emptyVars = map[int][]string{}
	if err := c.decode(data, getenv); err != nil {
		return nil, err
	}
	c.override(getenv)
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// expandError is a "${" that does not close on its line, or does not
// name a variable.
type expandError struct {
	line int
	msg  string
}

func (e *expandError) Error() string { return e.msg }

var varName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// decode reads the YAML over the defaults: once into a node tree to learn
// each key's line, once strictly into the struct, with the "${VAR}"s in
// its values expanded.
func (c *Config) decode(data []byte, getenv func(string) string) error {
	var root yaml.Node
	err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&root)
	if errors.Is(err, io.EOF) {
		return nil
	}
	if err != nil {
		return c.yamlError(err)
	}
	indexLines(&root, "", c.lines)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&expanding{c: c, getenv: getenv}); err != nil {
		var ee *expandError
		if errors.As(err, &ee) {
			return &Error{Source: c.source, Line: ee.line, Err: err}
		}
		return c.yamlError(err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		line := more.Line
		if len(more.Content) > 0 {
			line = more.Content[0].Line
		}
		return &Error{Source: c.source, Line: line, Err: errors.New("more than one YAML document")}
	}
	// A null secret block ("secret:") leaves the default, as a null block
	// does for the other services.
	if c.Services.Secret == nil {
		c.Services.Secret = Default().Services.Secret
	}
	return nil
}

// expanding decodes the file into a Config with each "${NAME}" in its
// values replaced by the variable's value, an unset variable being "".
// The values are expanded after YAML has read them, in the node tree, so
// a value is taken as it is whatever the scalar's quoting: a backslash or
// a quote in a secret stays one, and YAML syntax in it is no syntax.
//
// It has yaml.v3's older unmarshaler form on purpose: the unmarshal
// function that form is given decodes with the decoder at hand, strict as
// KnownFields made it, so the tree can be expanded in place between
// taking it and decoding it into the Config.
type expanding struct {
	c      *Config
	getenv func(string) string
}

func (x *expanding) UnmarshalYAML(unmarshal func(any) error) error {
	var root nodeRef
	if err := unmarshal(&root); err != nil {
		return err
	}
	if err := x.expand(root.n, root.n.Line); err != nil {
		return err
	}
	return unmarshal(x.c)
}

// nodeRef keeps the node it is decoded from: the decoder's own, not a copy.
type nodeRef struct{ n *yaml.Node }

func (r *nodeRef) UnmarshalYAML(n *yaml.Node) error {
	r.n = n
	return nil
}

// expand expands the scalar values under n; keyLine is the line of the
// key whose value n is. Keys are not expanded, and an alias is expanded
// once, where its anchor is.
func (x *expanding) expand(n *yaml.Node, keyLine int) error {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, ch := range n.Content {
			if err := x.expand(ch, ch.Line); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := x.expand(n.Content[i+1], n.Content[i].Line); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		return x.scalar(n, keyLine)
	}
	return nil
}

// scalar expands one value. A variable that expands to nothing is noted
// under keyLine, so a secret that came out empty can be refused naming
// its variable.
func (x *expanding) scalar(n *yaml.Node, keyLine int) error {
	if !strings.Contains(n.Value, "${") {
		return nil
	}
	var b strings.Builder
	rest := n.Value
	for {
		i := strings.Index(rest, "${")
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		rest = rest[i+2:]
		end := strings.IndexAny(rest, "}\n")
		if end < 0 || rest[end] != '}' {
			return &expandError{line: n.Line, msg: `"${" without a closing "}" on its line`}
		}
		name := rest[:end]
		if !varName.MatchString(name) {
			return &expandError{line: n.Line, msg: fmt.Sprintf("${%s}: %q is not a variable name", name, name)}
		}
		v := x.getenv(name)
		if v == "" {
			x.c.emptyVars[keyLine] = append(x.c.emptyVars[keyLine], name)
		}
		b.WriteString(v)
		rest = rest[end+1:]
	}
	n.Value = b.String()
	// A quoted, block or tagged scalar stays a string. A plain one is typed
	// as if its value had been written there (lease_seconds: ${LEASE} is a
	// number, an empty one null), except that a value is null only when
	// empty: a password "null" is a password.
	// A plain one is also trimmed, as YAML trimmed the value pasted into
	// the text before: a variable ending in a newline (a secret made from
	// a file) reads as it did.
	if n.Style&(yaml.TaggedStyle|yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0 {
		n.Value = strings.Trim(n.Value, " \t\r\n")
		n.Tag = ""
		if n.Value != "" && n.ShortTag() == "!!null" {
			n.Tag = "!!str"
		}
	}
	return nil
}

// indexLines records the line of every key under path.
func indexLines(n *yaml.Node, path string, lines map[string]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, ch := range n.Content {
			indexLines(ch, path, lines)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			if path != "" {
				k = path + "." + k
			}
			if _, seen := lines[k]; !seen {
				lines[k] = n.Content[i].Line
			}
			indexLines(n.Content[i+1], k, lines)
		}
		// A single secret block is the list's first entry.
		if path == "services.secret" {
			lines[secretKey(0)] = n.Line
			indexLines(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{n}}, secretKey(0), lines)
		}
	case yaml.SequenceNode:
		for i, ch := range n.Content {
			k := fmt.Sprintf("%s[%d]", path, i)
			lines[k] = ch.Line
			indexLines(ch, k, lines)
		}
	}
}

func secretKey(i int) string { return fmt.Sprintf("services.secret[%d]", i) }

var (
	yamlLine     = regexp.MustCompile(`^line (\d+): (.*)$`)
	unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
	// atField is how a service block's own errors name their key.
	atField = regexp.MustCompile(`^at (\S+): (.*)$`)
)

// yamlError names the key of a YAML error by its line: yaml.v3 gives the
// line and the Go type, but the user knows the file's keys.
func (c *Config) yamlError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			n, _ := strconv.Atoi(m[1])
			return &Error{Source: c.source, Line: n, Err: errors.New(m[2])}
		}
		return &Error{Source: c.source, Err: errors.New(msg)}
	}
	errs := make([]error, 0, len(te.Errors))
	for _, msg := range te.Errors {
		m := yamlLine.FindStringSubmatch(msg)
		if m == nil {
			errs = append(errs, &Error{Source: c.source, Err: errors.New(msg)})
			continue
		}
		n, _ := strconv.Atoi(m[1])
		if f := unknownField.FindStringSubmatch(m[2]); f != nil {
			errs = append(errs, &Error{Source: c.source, Line: n, Err: fmt.Errorf("unknown key %s", c.keyAt(n, f[1]))})
			continue
		}
		if f := atField.FindStringSubmatch(m[2]); f != nil {
			errs = append(errs, &Error{Source: c.source, Line: n, Key: c.keyAt(n, f[1]), Err: errors.New(f[2])})
			continue
		}
		errs = append(errs, &Error{Source: c.source, Line: n, Key: c.keyAt(n, ""), Err: errors.New(m[2])})
	}
	return errors.Join(errs...)
}

// keyAt finds the key path at a line, ending in name when name is given;
// the longest path wins, as the innermost key.
func (c *Config) keyAt(line int, name string) string {
	best := ""
	for k, l := range c.lines {
		if l != line || name != "" && k != name && !strings.HasSuffix(k, "."+name) {
			continue
		}
		if len(k) > len(best) {
			best = k
		}
	}
	if best == "" {
		return name
	}
	return best
}

// override applies the environment: a non-empty variable wins.
func (c *Config) override(getenv func(string) string) {
	for _, o := range []struct {
		env, key string
		to       *string
	}{
		{EnvRole, "nats.engine.role", &c.NATS.Engine.Role},
		{EnvRolloutID, "nats.engine.rollout_id", &c.NATS.Engine.RolloutID},
		{EnvNATSURL, "nats.url", &c.NATS.URL},
	} {
		if v := getenv(o.env); v != "" {
			*o.to = v
			c.fromEnv[o.key] = o.env
		}
	}
}

// SetBy records that the caller set key's value from source, such as a
// command-line flag ("--nats-url"), after Parse: an error about the key
// then names that source, not the file's line or a variable the value no
// longer comes from.
func (c *Config) SetBy(key, source string) {
	if c.fromEnv == nil {
		c.fromEnv = map[string]string{}
	}
	c.fromEnv[key] = source
}

// ErrorAt is err as an error about key, saying where the key's value came
// from (the file's line, or the variable or flag that set it), as every
// error of the configuration does. It matches domain.ErrInvalidConfig and
// err. It is for checks made after loading, such as the shared-backend
// check, which judge a value the configuration holds.
func (c *Config) ErrorAt(key string, err error) error { return c.errAt(key, err) }

// errAt builds an error about a key, saying where its value came from.
func (c *Config) errAt(key string, err error) error {
	if env, ok := c.fromEnv[key]; ok {
		return &Error{Source: c.source, Key: key, Env: env, Err: err}
	}
	line := c.lines[key]
	for k := key; line == 0 && strings.Contains(k, "."); {
		k = k[:strings.LastIndex(k, ".")]
		line = c.lines[k]
	}
	return &Error{Source: c.source, Line: line, Key: key, Err: err}
}

// UnmarshalYAML reads a service block strictly, as KnownFields does for
// the rest of the file.
func (s *Service) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf(
			"line %d: a service block is a mapping {adapter: <name>, config: {...}}", n.Line)}}
	}
	*s = Service{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var err error
		switch k.Value {
		case "adapter":
			err = v.Decode(&s.Adapter)
		case "config":
			if v.Kind != yaml.MappingNode && v.ShortTag() != "!!null" {
				return &yaml.TypeError{Errors: []string{fmt.Sprintf(
					"line %d: at config: want a mapping of the adapter's settings", k.Line)}}
			}
			if v.Kind == yaml.MappingNode {
				s.Config = *v
			}
		default:
			return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: field %s not found in type config.Service", k.Line, k.Value)}}
		}
		if err != nil {
			msg := err.Error()
			var te *yaml.TypeError
			if errors.As(err, &te) && len(te.Errors) > 0 {
				msg = te.Errors[0]
				if m := yamlLine.FindStringSubmatch(msg); m != nil {
					msg = m[2]
				}
			}
			return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: at %s: %s", k.Line, k.Value, msg)}}
		}
	}
	return nil
}

// UnmarshalYAML reads a list of secret blocks, or one block as a list of
// one.
func (s *Secrets) UnmarshalYAML(n *yaml.Node) error {
	items := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		items = n.Content
	}
	out := make(Secrets, len(items))
	for i, item := range items {
		if err := out[i].UnmarshalYAML(item); err != nil {
			return err
		}
	}
	*s = out
	return nil
}

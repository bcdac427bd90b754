// Package dotenv reads secrets from a .env file, parsed strictly when the
// store opens: a line the parser does not understand is an error naming
// the file and line, never a secret silently lost or misread.
//
// The syntax, one secret per line:
//
//	# a comment, and blank lines, are ignored
//	NAME=value            unquoted: ASCII blanks trimmed; " #" (or a tab and #) starts a comment; no quotes inside
//	NAME='value'          single quotes: taken literally
//	NAME="a\nb \"c\""     double quotes: escapes \n \r \t \" \\ \$
//	export NAME=value     "export" and the blanks after it are allowed and ignored
//
// Nothing is expanded, unlike Docker Compose and shells. "${" in an
// unquoted or double-quoted value, where they would expand a variable, is
// an error: the file was written for expansion, and its text taken as the
// secret would be wrong. Single quotes keep it, as does \$ in double
// quotes; $VAR without braces is taken literally. docs/security.md
// documents the syntax for operators.
//
// Names are letters, digits and underscores, not starting with a digit,
// and may appear once. An unquoted value that begins or ends with a space
// character other than ASCII white space (U+00A0, say) is an error: quote
// it. Values are UTF-8 text; a byte order mark starting
// the file is skipped, and a UTF-16 file is refused. Lines end in LF or
// CR LF; a carriage return inside a line is an error. Errors name the
// file, the line and the secret, never the text of the line: it may hold
// the secret's value.
package dotenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/abi-engine/engine/ports"
)

// maxLine is the longest line the parser reads, 1 MiB.
const maxLine = 1 << 20

// byteOrderMark is U+FEFF in UTF-8, skipped at the start of a file.
const byteOrderMark = "\uFEFF"

var validName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Config is the dotenv adapter's block under services.secret.config.
type Config struct {
	// Path is the .env file.
	Path string `yaml:"path"`
}

// LocalStorage implements ports.StorageConfig: secrets are deployment
// configuration, the same for every engine of a deploy, so they never
// count as data kept on one host.
func (Config) LocalStorage() string { return "" }

// Check refuses an empty path, naming it under prefix: the registry calls
// it when the configuration is built, before anything opens.
func (c Config) Check(prefix string) error {
	if c.Path == "" {
		return fmt.Errorf("%s.path is empty: %w", prefix, ports.ErrInvalidArgument)
	}
	return nil
}

// Store holds the secrets read from the file when it opened.
type Store struct {
	secrets map[string]string
}

var _ ports.Secrets = (*Store)(nil)

// CheckFile reads and parses the file as Open does, and returns the error
// Open would, naming the file and line, never a value. `engine config
// check` calls it, so a broken file is found before an engine serves.
func (c Config) CheckFile() error {
	_, err := read(c)
	return err
}

// Open reads and parses the file.
func Open(_ context.Context, c Config) (*Store, error) {
	secrets, err := read(c)
	if err != nil {
		return nil, err
	}
	return &Store{secrets: secrets}, nil
}

func read(c Config) (map[string]string, error) {
	// The error names the setting as engine.yaml spells it; which block
	// of services.secret it is in, the path tells.
	if c.Path == "" {
		return nil, fmt.Errorf("services.secret: the dotenv adapter's config.path is empty: %w", ports.ErrInvalidArgument)
	}
	f, err := os.Open(c.Path)
	if err != nil {
		return nil, fmt.Errorf("services.secret: the dotenv adapter's config.path: %w", err)
	}
	defer f.Close()
	return parse(c.Path, bufio.NewScanner(f))
}

// Close releases nothing: the file was closed once read.
func (s *Store) Close() error { return nil }

// Get implements ports.Secrets.
func (s *Store) Get(_ context.Context, name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: a secret's name is empty", ports.ErrInvalidArgument)
	}
	v, ok := s.secrets[name]
	if !ok {
		// The file's path stays out: the error reaches callers.
		return "", fmt.Errorf("secret %q: %w", name, ports.ErrNotFound)
	}
	return v, nil
}

// List implements ports.Secrets.
func (s *Store) List(_ context.Context) ([]string, error) {
	names := make([]string, 0, len(s.secrets))
	for name := range s.secrets {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

func parse(path string, lines *bufio.Scanner) (map[string]string, error) {
	lines.Buffer(make([]byte, 0, 64<<10), maxLine)
	secrets := map[string]string{}
	setOn := map[string]int{}
	n := 1
	for ; lines.Scan(); n++ {
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s: %w", path, n, fmt.Sprintf(format, args...), ports.ErrInvalidArgument)
		}
		text := lines.Text()
		if n == 1 {
			// Some editors start a UTF-8 file with a byte order mark:
			// it marks the encoding and is no part of the first line.
			text = strings.TrimPrefix(text, byteOrderMark)
			// Windows PowerShell 5 writes UTF-16 with its mark, which
			// would read as a stray carriage return or a bad name.
			if strings.HasPrefix(text, "\xff\xfe") || strings.HasPrefix(text, "\xfe\xff") {
				return nil, fail("the file is UTF-16 text (it starts with a UTF-16 byte order mark): save it as UTF-8")
			}
		}
		// Blanks of any kind before the name are layout. After the value
		// only ASCII ones are: another space character ending an unquoted
		// value is refused there (parseValue), not trimmed unseen.
		line := strings.TrimRightFunc(strings.TrimLeftFunc(text, unicode.IsSpace), asciiSpace)
		// Lines end in LF or CR LF. A CR inside one is most likely a file
		// whose lines end in CR alone, which reads as one line: its first
		// secret would take the rest as its value, or a comment the rest.
		if strings.ContainsRune(line, '\r') {
			return nil, fail("a carriage return inside the line: lines end in LF or CR LF, and a value holds one as \\r in double quotes")
		}
		if line == "" || line[0] == '#' {
			continue
		}
		// "export" and the blanks after it, a space or a tab as a shell
		// takes them, are ignored; "export" before '=' is a name.
		if rest, ok := strings.CutPrefix(line, "export"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			if rest = strings.TrimLeft(rest, " \t"); !strings.HasPrefix(rest, "=") {
				line = rest
			}
		}
		name, rest, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fail("the line is not NAME=value")
		}
		name = strings.TrimSpace(name)
		if !validName.MatchString(name) {
			return nil, fail("the text before '=' is not a name (letters, digits and underscores, not starting with a digit)")
		}
		if first, dup := setOn[name]; dup {
			return nil, fail("%s is already set on line %d", name, first)
		}
		value, err := parseValue(rest)
		if err != nil {
			return nil, fail("%s: %v", name, err)
		}
		// Secrets are served as JSON text, which would carry U+FFFD in
		// place of these bytes: a file in another encoding is refused
		// here, not found out by a caller's get.
		if !utf8.ValidString(value) {
			return nil, fail("%s: the value is not UTF-8 text, as a secret must be", name)
		}
		secrets[name] = value
		setOn[name] = n
	}
	if err := lines.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("%s:%d: the line is 1 MiB or longer, more than a line may hold: %w", path, n, ports.ErrInvalidArgument)
	} else if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return secrets, nil
}

func parseValue(raw string) (string, error) {
	s := strings.TrimLeft(raw, " \t")
	switch {
	case strings.HasPrefix(s, `"`):
		return parseDoubleQuoted(s[1:])
	case strings.HasPrefix(s, `'`):
		end := strings.IndexByte(s[1:], '\'')
		if end < 0 {
			return "", fmt.Errorf("single quote not closed on this line")
		}
		return s[1 : 1+end], onlyComment(s[2+end:])
	}
	// A '#' after a space or a tab starts a comment, the one right after
	// '=' and its spaces too ("NAME= # unset" is empty).
	s = raw
	for i := 1; i < len(s); i++ {
		if s[i] == '#' && (s[i-1] == ' ' || s[i-1] == '\t') {
			s = s[:i]
			break
		}
	}
	if strings.ContainsAny(s, `"'`) {
		return "", fmt.Errorf("unquoted value contains a quote: quote the whole value")
	}
	if strings.Contains(s, "${") {
		return "", errExpansion
	}
	s = strings.TrimFunc(s, asciiSpace)
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	for _, r := range []rune{first, last} {
		if s != "" && unicode.IsSpace(r) {
			return "", fmt.Errorf("the unquoted value begins or ends with %U, a space character other than a space or a tab, "+
				"which is neither trimmed nor taken unquoted: quote the value to keep it, or delete it", r)
		}
	}
	return s, nil
}

// asciiSpace reports the blanks trimmed from an unquoted value: spaces,
// tabs and the other ASCII white space. A no-break space or another
// Unicode one, as a copy from a web page or a word processor brings, may
// be part of a password: trimmed, the secret served would differ from the
// one the file was written for, and no error would say so.
func asciiSpace(r rune) bool { return r < utf8.RuneSelf && unicode.IsSpace(r) }

// errExpansion is the error of a value holding "${" where other tools
// expand it. It names no variable: the text may be part of the value.
var errExpansion = errors.New(`"${" would expand a variable in Docker Compose or a shell, and this adapter expands none: ` +
	`write the value out, or keep the text as it is in single quotes, or as \${ in double quotes`)

func parseDoubleQuoted(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '$':
			if strings.HasPrefix(s[i:], "${") {
				return "", errExpansion
			}
			b.WriteByte(c)
		case '"':
			return b.String(), onlyComment(s[i+1:])
		case '\\':
			if i+1 == len(s) {
				return "", fmt.Errorf("double quote not closed on this line")
			}
			i++
			switch s[i] {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case '"', '\\', '$':
				b.WriteByte(s[i])
			default:
				return "", fmt.Errorf("unknown escape \\%c in double quotes", s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("double quote not closed on this line")
}

// onlyComment accepts what may follow a closing quote: spaces, then
// perhaps a comment.
func onlyComment(rest string) error {
	rest = strings.TrimSpace(rest)
	if rest != "" && rest[0] != '#' {
		return fmt.Errorf("text after the closing quote")
	}
	return nil
}

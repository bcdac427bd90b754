package dotenv_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/abi-engine/engine/adapters/secondary/secret/dotenv"
	"github.com/abi-engine/engine/contracttests"
	"github.com/abi-engine/engine/ports"
)

// quote writes a value in double quotes with the escapes the parser reads.
var quote = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`, "\t", `\t`, "$", `\$`)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), ".env")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
	return path
}

func open(t *testing.T, path string) *dotenv.Store {
	t.Helper()
	s, err := dotenv.Open(t.Context(), dotenv.Config{Path: path})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSecretContract(t *testing.T) {
	t.Run("dotenv", func(t *testing.T) {
		contracttests.RunSecret(t, contracttests.SecretHarnessFunc(func(t *testing.T, secrets map[string]string) func(*testing.T) ports.Secrets {
			var b strings.Builder
			b.WriteString("# written by the test\n\n")
			for name, value := range secrets {
				fmt.Fprintf(&b, "%s=\"%s\"\n", name, quote.Replace(value))
			}
			path := writeFile(t, b.String())
			return func(t *testing.T) ports.Secrets { return open(t, path) }
		}))
	})
}

func TestSyntax(t *testing.T) {
	s := open(t, writeFile(t, strings.Join([]string{
		"# comment",
		"   # indented comment",
		"",
		"PLAIN=value",
		"SPACED = spaced value   ",
		"COMMENTED=value # a comment",
		"HASH=a#b",
		"export EXPORTED=yes",
		`SINGLE='literal \n "double" # not a comment'  # comment`,
		`DOUBLE="tab\tnew\nquote\"backslash\\dollar\$"`,
		"EMPTY=",
		"UNSET= # a comment right after the sign",
		"TABBED=value\t# a comment after a tab",
		`EMPTY_QUOTED=""`,
		"WINDOWS=crlf\r",
	}, "\n")))
	for name, want := range map[string]string{
		"PLAIN":        "value",
		"SPACED":       "spaced value",
		"COMMENTED":    "value",
		"HASH":         "a#b",
		"EXPORTED":     "yes",
		"SINGLE":       `literal \n "double" # not a comment`,
		"DOUBLE":       "tab\tnew\nquote\"backslash\\dollar$",
		"EMPTY":        "",
		"UNSET":        "",
		"TABBED":       "value",
		"EMPTY_QUOTED": "",
		"WINDOWS":      "crlf",
	} {
		got, err := s.Get(t.Context(), name)
		if err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
}

// "export" followed by a tab is ignored as it is followed by a space, as a
// shell takes both. Before, only "export " was, and a line starting
// "export" and a tab was refused as a name that is not one. A secret named
// export, with blanks around the '=', is still a secret of that name.
func TestExportFollowedByATabIsIgnoredAsFollowedByASpace(t *testing.T) {
	s := open(t, writeFile(t, "export\tTABBED=1\nexport \t MIXED=2\nexport = 3\n"))
	for name, want := range map[string]string{"TABBED": "1", "MIXED": "2", "export": "3"} {
		if got, err := s.Get(t.Context(), name); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
}

func TestErrorsNameTheLine(t *testing.T) {
	for _, c := range []struct {
		content, want string
	}{
		{"A=1\nno equals sign\n", ":2: "},
		{"A=1\n\n1BAD=x\n", ":3: "},
		{"BAD-NAME=x\n", ":1: "},
		{"A=1\nB=2\nA=3\n", "A is already set on line 1"},
		{"A=\"unterminated\n", ":1: "},
		{"A='unterminated\n", ":1: "},
		{"A=\"bad \\q escape\"\n", `unknown escape \q`},
		{"A=\"x\" trailing\n", ":1: "},
		{"A=it's\n", "contains a quote"},
		{"=value\n", ":1: "},
	} {
		path := writeFile(t, c.content)
		_, err := dotenv.Open(t.Context(), dotenv.Config{Path: path})
		if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open of %q: err %v, want ErrInvalidArgument naming %s and %q", c.content, err, path, c.want)
		}
	}
}

// A line the parser refuses is named by its file, its number and its
// secret, never quoted: its text may be the value, and the error ends up
// in the engine's log and its exit message.
func TestErrorsNeverShowTheValue(t *testing.T) {
	const value = "s3cr3t-Zq9"
	for _, content := range []string{
		"DB_PASSWORD: " + value + "\n",
		"export DB_PASSWORD " + value + "\n",
		"DB_PASSWORD=" + value + "'\n",
		`DB_PASSWORD="x"` + value + "\n",
		`DB_PASSWORD='x' ` + value + "\n",
		`DB_PASSWORD="` + value + `\q"` + "\n",
		value + "=x\n",
	} {
		_, err := dotenv.Open(t.Context(), dotenv.Config{Path: writeFile(t, content)})
		if err == nil {
			t.Errorf("Open of %q: no error", content)
		} else if strings.Contains(err.Error(), "Zq9") {
			t.Errorf("Open of %q: the error shows the value: %v", content, err)
		}
	}
}

func TestOpen(t *testing.T) {
	if _, err := dotenv.Open(t.Context(), dotenv.Config{}); !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), "path") {
		t.Fatalf("Open without a path: err %v, want ErrInvalidArgument naming path", err)
	}
	if _, err := dotenv.Open(t.Context(), dotenv.Config{Path: filepath.Join(t.TempDir(), "missing.env")}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open of a missing file: err %v, want one saying it does not exist", err)
	}
	if got := (dotenv.Config{Path: ".env"}).LocalStorage(); got != "" {
		t.Fatalf("LocalStorage %q, want \"\": secrets are deployment configuration", got)
	}
}

// "${" in an unquoted or double-quoted value, where Docker Compose and
// shells expand a variable, is refused naming the file, the line and the
// secret, never the variable, which may be part of the value. Before, the
// text was taken as the secret, so a file written for expansion served
// "postgres://${DB_USER}@db" as a password or URL. Single quotes and \$
// keep it as written, and $VAR without braces is taken literally.
func TestAVariableToExpandIsRefusedNamingTheLine(t *testing.T) {
	for _, content := range []string{
		"A=1\nDB_URL=postgres://${DB_USER}@db/app\n",
		"A=1\nDB_URL=\"postgres://${DB_USER}@db/app\"\n",
	} {
		path := writeFile(t, content)
		_, err := dotenv.Open(t.Context(), dotenv.Config{Path: path})
		if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), path+":2: DB_URL: ") ||
			!strings.Contains(err.Error(), "single quotes") || strings.Contains(err.Error(), "DB_USER") {
			t.Errorf("Open of %q: err %v, want ErrInvalidArgument naming %s:2: and DB_URL, never DB_USER", content, err, path)
		}
	}
	s := open(t, writeFile(t, strings.Join([]string{
		`SINGLE='postgres://${DB_USER}@db/app'`,
		`ESCAPED="postgres://\${DB_USER}@db/app"`,
		"BARE=pa$word",
		"COMMENTED=x # ${NOT} a value",
	}, "\n")))
	for name, want := range map[string]string{
		"SINGLE":    "postgres://${DB_USER}@db/app",
		"ESCAPED":   "postgres://${DB_USER}@db/app",
		"BARE":      "pa$word",
		"COMMENTED": "x",
	} {
		if got, err := s.Get(t.Context(), name); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
}

// A file that does not open is named by the setting that gives it, as
// engine.yaml spells it, and by its path. Before, the error named
// "secret.config.path", a key no configuration has: the blocks are under
// services.secret.
func TestAFileThatDoesNotOpenIsNamedByItsSetting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing.env")
	for _, err := range []error{
		func() error { _, err := dotenv.Open(t.Context(), dotenv.Config{Path: path}); return err }(),
		dotenv.Config{Path: path}.CheckFile(),
	} {
		if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), path) ||
			!strings.Contains(err.Error(), "services.secret") || !strings.Contains(err.Error(), "config.path") {
			t.Errorf("err %v, want one saying the file does not exist, naming %s and the setting services.secret ... config.path", err, path)
		}
	}
}

// FuzzOpen reads any file without panicking, and its errors never quote the
// file: seeds and finds put '@' in a value, and no error of the parser's
// own holds one. An unknown escape names its one character, so `\@` may.
func FuzzOpen(f *testing.F) {
	for _, seed := range []string{
		"A=p@ss\n",
		"A: p@ss\n",
		"A=p@ss'\n",
		`A="x" p@ss` + "\n",
		`A='x'p@ss` + "\n",
		"A=\"p@ss\n",
		"p@ss=x\n",
		"export A p@ss\r\n",
		"A=1\nA=p@ss\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, content string) {
		_, err := dotenv.Open(t.Context(), dotenv.Config{Path: writeFile(t, content)})
		if err != nil && strings.Contains(err.Error(), "@") && !strings.Contains(content, `\@`) {
			t.Fatalf("Open of %q: the error quotes the file: %v", content, err)
		}
	})
}

// Secrets are served as UTF-8 text, and JSON would carry U+FFFD in place
// of bytes that are not: a file written in another encoding (Latin-1, say)
// is refused as it opens, naming its file, line and secret, never the
// value, as every other line the store could not serve as written is.
func TestAValueThatIsNotUTF8IsRefusedAsTheFileOpens(t *testing.T) {
	for _, content := range []string{
		"API_KEY=k\nDB_PASSWORD=p\xe4ss-Zq9\n",
		"API_KEY=k\nDB_PASSWORD='p\xe4ss-Zq9'\n",
		"API_KEY=k\nDB_PASSWORD=\"p\xe4ss-Zq9\"\n",
	} {
		path := writeFile(t, content)
		_, err := dotenv.Open(t.Context(), dotenv.Config{Path: path})
		if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), path+":2:") ||
			!strings.Contains(err.Error(), "DB_PASSWORD") || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("Open of %q: err %v, want ErrInvalidArgument naming %s:2:, DB_PASSWORD and UTF-8", content, err, path)
		} else if strings.Contains(err.Error(), "Zq9") {
			t.Errorf("Open of %q: the error shows the value: %v", content, err)
		}
	}
}

// A file whose lines end in a carriage return alone reads as one line: the
// first secret took the rest of the file as its value and every later one
// was lost, or, behind a comment, every one was. A carriage return inside a
// line is refused, naming the line; one at its end (CR LF) is not.
func TestALineWithACarriageReturnInsideIsRefused(t *testing.T) {
	for _, content := range []string{
		"API_KEY=k\rDB_PASSWORD=Zq9\r",
		"# written on an old Mac\rAPI_KEY=k\rDB_PASSWORD=Zq9\r",
		"API_KEY='k\rZq9'\n",
		"API_KEY=\"k\rZq9\"\n",
	} {
		path := writeFile(t, content)
		_, err := dotenv.Open(t.Context(), dotenv.Config{Path: path})
		if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), path+":1:") || !strings.Contains(err.Error(), "carriage return") {
			t.Errorf("Open of %q: err %v, want ErrInvalidArgument naming %s:1: and the carriage return", content, err, path)
		} else if strings.Contains(err.Error(), "Zq9") {
			t.Errorf("Open of %q: the error shows the value: %v", content, err)
		}
	}
	s := open(t, writeFile(t, "API_KEY=k\r\nDB_PASSWORD=\"a\\rb\"\r\n"))
	for name, want := range map[string]string{"API_KEY": "k", "DB_PASSWORD": "a\rb"} {
		if got, err := s.Get(t.Context(), name); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
}

// Some editors start a UTF-8 file with a byte order mark (EF BB BF). It is
// no part of the first line: the file opens and its first secret is named
// as written, whether a secret, a comment or a blank line comes first.
func TestAFileStartingWithAByteOrderMarkOpens(t *testing.T) {
	for _, content := range []string{
		"\uFEFFAPI_KEY=k\nDB_PASSWORD=p\n",
		"\uFEFFexport API_KEY='k'\r\nDB_PASSWORD=\"p\"\r\n",
		"\uFEFF# secrets\nAPI_KEY=k\nDB_PASSWORD=p\n",
		"\uFEFF\nAPI_KEY=k\nDB_PASSWORD=p\n",
	} {
		s := open(t, writeFile(t, content))
		for name, want := range map[string]string{"API_KEY": "k", "DB_PASSWORD": "p"} {
			if got, err := s.Get(t.Context(), name); err != nil || got != want {
				t.Errorf("file %q: %s = %q, %v; want %q", content, name, got, err, want)
			}
		}
		if names, _ := s.List(t.Context()); len(names) != 2 {
			t.Errorf("file %q: names %q, want API_KEY and DB_PASSWORD", content, names)
		}
	}
}

// A byte order mark anywhere but at the very start of the file is text of
// the line it is on, and a name holding one is refused.
func TestAByteOrderMarkAfterTheStartIsNotSkipped(t *testing.T) {
	path := writeFile(t, "API_KEY=k\n\uFEFFDB_PASSWORD=p\n")
	if _, err := dotenv.Open(t.Context(), dotenv.Config{Path: path}); !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), path+":2:") {
		t.Fatalf("Open: err %v, want ErrInvalidArgument naming %s:2:", err, path)
	}
	s := open(t, writeFile(t, "\uFEFFAPI_KEY=\"\uFEFFk\"\n"))
	if got, err := s.Get(t.Context(), "API_KEY"); err != nil || got != "\uFEFFk" {
		t.Fatalf("API_KEY = %q, %v; want the mark kept inside the quotes", got, err)
	}
}

// docs/security.md shows the syntax by an example; it reads as the page
// says, ${DB_USER} kept in single quotes included, so the page stays true.
func TestTheDocumentedExampleReadsAsDocumented(t *testing.T) {
	page, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "security.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, example, ok := strings.Cut(string(page), "```dotenv\n")
	if ok {
		example, _, ok = strings.Cut(example, "```")
	}
	if !ok {
		t.Fatal("docs/security.md has no ```dotenv example")
	}
	s := open(t, writeFile(t, example))
	want := map[string]string{
		"API_KEY": "k-123",
		"HASHED":  "a#b",
		"SPACED":  "two words",
		"REGION":  "eu-1",
		"LITERAL": `no \n escapes`,
		"ESCAPED": "line 1\nline 2",
		"EMPTY":   "",
		"DB_URL":  "postgres://${DB_USER}@db/app",
	}
	for name, value := range want {
		if got, err := s.Get(t.Context(), name); err != nil || got != value {
			t.Errorf("%s = %q, %v; the page says %q", name, got, err, value)
		}
	}
	if names, _ := s.List(t.Context()); len(names) != len(want) {
		t.Errorf("the example sets %q, want the %d secrets the page explains", names, len(want))
	}
}

// A file saved as UTF-16, as Windows PowerShell 5 writes `echo A=b > .env`,
// is refused saying so, on line 1, so the operator knows to save it as
// UTF-8; it was refused as a line whose name is not one.
func TestAUTF16FileIsRefusedSayingSo(t *testing.T) {
	utf16 := func(bigEndian bool, s string) string {
		var b []byte
		if bigEndian {
			b = append(b, 0xFE, 0xFF)
		} else {
			b = append(b, 0xFF, 0xFE)
		}
		for _, r := range s {
			if bigEndian {
				b = append(b, 0, byte(r))
			} else {
				b = append(b, byte(r), 0)
			}
		}
		return string(b)
	}
	for _, bigEndian := range []bool{false, true} {
		path := writeFile(t, utf16(bigEndian, "API_KEY=k-Zq9\r\nDB_PASSWORD=Zq9\r\n"))
		_, err := dotenv.Open(t.Context(), dotenv.Config{Path: path})
		if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), path+":1:") ||
			!strings.Contains(err.Error(), "UTF-16") || !strings.Contains(err.Error(), "save it as UTF-8") {
			t.Errorf("Open of a UTF-16 file (big endian %v): err %v, want ErrInvalidArgument naming %s:1:, UTF-16 and what to do", bigEndian, err, path)
		} else if strings.Contains(err.Error(), "Zq9") {
			t.Errorf("Open of a UTF-16 file: the error shows the value: %v", err)
		}
	}
}

// A line longer than the parser reads (1 MiB) is refused naming the file,
// its line and the limit, as every other line it cannot read is; the
// error named neither the line nor the limit.
func TestALineTooLongIsRefusedNamingTheLine(t *testing.T) {
	path := writeFile(t, "API_KEY=k\n# two\nDB_PASSWORD="+strings.Repeat("Zq9", 1<<19)+"\n")
	_, err := dotenv.Open(t.Context(), dotenv.Config{Path: path})
	if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), path+":3:") || !strings.Contains(err.Error(), "1 MiB") {
		t.Fatalf("Open: err %v, want ErrInvalidArgument naming %s:3: and the limit", err, path)
	}
	if strings.Contains(err.Error(), "Zq9") {
		t.Fatalf("Open: the error shows the value: %v", err)
	}
}

// An unquoted value loses the ASCII blanks around it and nothing else: one
// that begins or ends with another space character (a no-break space, as
// a copy from a web page brings, or an ideographic space) is refused
// naming the line and the character, and quoted it is kept whole. Before,
// such a character was trimmed unseen, and a password ending in it was
// served without it.
func TestAnUnquotedValueEndingInAnotherSpaceCharacterIsRefusedNotTrimmed(t *testing.T) {
	for _, c := range []struct{ content, want string }{
		{"A=1\nKEY=s3cr3t\u00a0\n", ":2: KEY: the unquoted value begins or ends with U+00A0"},
		{"KEY=s3cr3t\u00a0 # a comment\n", ":1: KEY: the unquoted value begins or ends with U+00A0"},
		{"KEY=\u3000s3cr3t\n", ":1: KEY: the unquoted value begins or ends with U+3000"},
	} {
		path := writeFile(t, c.content)
		_, err := dotenv.Open(t.Context(), dotenv.Config{Path: path})
		if !errors.Is(err, ports.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open of %q: err %v, want ErrInvalidArgument saying %q", c.content, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Open of %q: the error shows the value: %v", c.content, err)
		}
	}

	s := open(t, writeFile(t, strings.Join([]string{
		"\u00a0",
		"\u00a0INDENTED=x",
		"QUOTED=\"secret\u00a0\"",
		"SINGLE='\u3000secret'",
		"INSIDE=two\u00a0words",
		"BLANKS= \tvalue \t",
	}, "\n")))
	for name, want := range map[string]string{
		"INDENTED": "x",
		"QUOTED":   "secret\u00a0",
		"SINGLE":   "\u3000secret",
		"INSIDE":   "two\u00a0words",
		"BLANKS":   "value",
	} {
		if got, err := s.Get(t.Context(), name); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
}

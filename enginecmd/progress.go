package enginecmd

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progressFrom is the size from which a transfer shows a progress bar.
const progressFrom = 1 << 20

// progress draws a transfer's progress on one terminal line, redrawn at
// most every redraw interval. The zero total means the size is unknown: the
// line then shows the bytes so far.
type progress struct {
	w      io.Writer
	label  string
	total  int64
	done   int64
	drawn  time.Time
	shown  bool
	redraw time.Duration
}

// newProgress returns a bar on w for a transfer of total bytes (0 when
// unknown), or nil when w is not a terminal: a bar in a log file or a pipe
// is noise.
func newProgress(w io.Writer, label string, total int64) *progress {
	if !isTerminal(w) {
		return nil
	}
	return &progress{w: w, label: label, total: total, redraw: 100 * time.Millisecond}
}

// reader counts what r yields; a nil progress counts nothing.
func (p *progress) reader(r io.Reader) io.Reader {
	if p == nil {
		return r
	}
	return progressReader{r: r, p: p}
}

type progressReader struct {
	r io.Reader
	p *progress
}

func (pr progressReader) Read(b []byte) (int, error) {
	n, err := pr.r.Read(b)
	pr.p.add(n)
	return n, err
}

func (p *progress) add(n int) {
	p.done += int64(n)
	if p.total > 0 && p.total <= progressFrom || p.total == 0 && p.done <= progressFrom {
		return
	}
	if now := time.Now(); !p.shown || now.Sub(p.drawn) >= p.redraw {
		p.drawn, p.shown = now, true
		p.draw()
	}
}

// finish draws the last state and ends the line, if a bar was shown.
func (p *progress) finish() {
	if p == nil || !p.shown {
		return
	}
	p.draw()
	fmt.Fprintln(p.w)
}

func (p *progress) draw() {
	const width = 30
	if p.total <= 0 {
		fmt.Fprintf(p.w, "\r%s %s", p.label, mib(p.done))
		return
	}
	filled := int(min(p.done, p.total) * width / p.total)
	fmt.Fprintf(p.w, "\r%s [%s%s] %3d%% %s / %s", p.label,
		strings.Repeat("#", filled), strings.Repeat(".", width-filled),
		min(p.done, p.total)*100/p.total, mib(p.done), mib(p.total))
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/abi-engine/engine/internal/natstest"
)

// stuckJobPackage is an engine whose one module's job never returns from
// its run and does not heed its cancellation.
const stuckJobPackage = "github.com/abi-engine/engine/cmd/engine/testdata/stuckjob"

// A real engine process stopped by SIGTERM while a job's run ignores its
// cancellation waits for that run a lease at most, as ADR 0004 promises:
// it then logs the job by its name, releases the lease, which the record
// says, and exits 0. The test in app holds the same for an engine in the
// test's process; this one holds it for the binary and its signal
// handling, where a stop that waited on the run for good would leave the
// process holding and renewing the lease until something killed it.
func TestSIGTERMWithAJobRunThatNeverReturnsReleasesTheLeaseAndExits(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "stuckjob")
	if out, err := exec.CommandContext(t.Context(), "go", "build", "-o", bin, stuckJobPackage).CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", stuckJobPackage, err, out)
	}
	url := natstest.StartServer(t).ClientURL()
	cmd := exec.Command(bin, "--config", writeConfig(t, url))
	e := startProcess(t, cmd)
	e.waitLog(t, "the stuck job's run began")
	holder := readLease(t, url).Holder

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := e.exitCode(t); code != 0 {
		t.Fatalf("the engine exited %d after SIGTERM, want 0:\n%s", code, e.output())
	}
	out := e.output()
	if !strings.Contains(out, "job runs did not return within their time") || !strings.Contains(out, "jobs=[stuck]") {
		t.Errorf("the engine's log does not name the stuck job its stop gave up on:\n%s", out)
	}
	rec := readLease(t, url)
	if !rec.Holder.Released || rec.Holder.InstanceID != holder.InstanceID {
		t.Fatalf("after the engine's exit the lease record is %+v, want %s's released record:\n%s", rec.Holder, holder.InstanceID, out)
	}
}

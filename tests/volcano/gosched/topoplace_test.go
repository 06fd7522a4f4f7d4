package gosched

// The real `topoplace volcano serve` (the Python extender) as a child process on loopback.
//
// The test starts it in its own process group so that stopping it also stops the solver worker
// it spawns; "slow" is a real hang (SIGSTOP: the kernel still accepts connections, nothing
// answers), "down" is a real stop (SIGTERM, then the port refuses), "restarted" is a new process
// on the same port with none of the old one's state.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the repository this module lives in (tests/volcano/gosched → ../../..).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatalf("repository root: %v", err)
	}
	return root
}

// pythonFor is the interpreter that runs topoplace: $TOPOPLACE_PYTHON, else the repository's
// .venv (what `make setup` builds).
func pythonFor(t *testing.T, root string) string {
	t.Helper()
	if p := os.Getenv("TOPOPLACE_PYTHON"); p != "" {
		return p
	}
	p := filepath.Join(root, ".venv", "bin", "python")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no Python for topoplace: set TOPOPLACE_PYTHON or run `make setup` (looked for %s)", p)
	}
	return p
}

type topoplace struct {
	t       *testing.T
	root    string
	python  string
	port    int
	args    []string
	logPath string
	cmd     *exec.Cmd
	paused  bool
}

// freePort asks the kernel for a loopback port nobody listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startTopoplace runs `topoplace volcano serve` on 127.0.0.1 and waits until /healthz answers.
// --dry-run: no API server runs here, so pod patches are logged, not sent.
func startTopoplace(t *testing.T, hypernodes string, extra ...string) *topoplace {
	t.Helper()
	root := repoRoot(t)
	tp := &topoplace{t: t, root: root, python: pythonFor(t, root), port: freePort(t)}
	tp.args = append([]string{"--dry-run"}, extra...)
	if hypernodes != "" {
		tp.args = append(tp.args, "--hypernodes", hypernodes)
	}
	tp.logPath = filepath.Join(t.TempDir(), "topoplace.log")
	t.Cleanup(tp.stop)
	// The port was free a moment ago; on a busy machine another process may take it before Python
	// binds it: then another port.
	for attempt := 1; ; attempt++ {
		err := tp.tryStart()
		if err == nil {
			return tp
		}
		if !errors.Is(err, errPortTaken) || attempt == 5 {
			t.Fatalf("%v; its log:\n%s", err, tp.log())
		}
		tp.port = freePort(t)
	}
}

var errPortTaken = errors.New("the port was taken")

func (tp *topoplace) url() string { return fmt.Sprintf("http://127.0.0.1:%d", tp.port) }

// start runs topoplace on its port (a restart: the same one, waiting for it to be free again).
func (tp *topoplace) start() {
	tp.t.Helper()
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = tp.tryStart(); !errors.Is(err, errPortTaken) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		tp.t.Fatalf("%v; its log:\n%s", err, tp.log())
	}
}

func (tp *topoplace) tryStart() error {
	log, err := os.OpenFile(tp.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("topoplace log: %w", err)
	}
	args := append([]string{"-m", "solver.cli", "volcano", "serve",
		"--host", "127.0.0.1", "--port", fmt.Sprint(tp.port)}, tp.args...)
	cmd := exec.Command(tp.python, args...)
	cmd.Dir = tp.root
	// The worktree's code first: the tests exercise this checkout, not an installed copy.
	cmd.Env = append(os.Environ(), "PYTHONPATH="+tp.root+string(os.PathListSeparator)+filepath.Join(tp.root, "proto"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	startErr := cmd.Start()
	log.Close()
	if startErr != nil {
		return fmt.Errorf("start topoplace: %w", startErr)
	}
	tp.cmd = cmd
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			tp.cmd = nil
			if strings.Contains(tp.fullLog(), "Address already in use") {
				return fmt.Errorf("topoplace on port %d: %w", tp.port, errPortTaken)
			}
			return fmt.Errorf("topoplace exited before serving (%v)", err)
		default:
		}
		resp, err := http.Get(tp.url() + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				go func() { <-exited }()
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	tp.stop()
	return fmt.Errorf("topoplace did not answer /healthz within 90 s")
}

// stop ends the process group this test started (SIGTERM, SIGKILL after 10 s) and waits until
// the port refuses connections.
func (tp *topoplace) stop() {
	if tp.cmd == nil {
		return
	}
	pgid := tp.cmd.Process.Pid
	if tp.paused {
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		tp.paused = false
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && syscall.Kill(pgid, 0) == nil && !tp.reaped() {
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	tp.cmd = nil
	for i := 0; i < 100; i++ {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", tp.port), 100*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(50 * time.Millisecond)
	}
}

func (tp *topoplace) reaped() bool {
	return tp.cmd.ProcessState != nil
}

// restart: a new process on the same port, with none of the old one's plan or caches.
func (tp *topoplace) restart() {
	tp.stop()
	tp.start()
}

// pause freezes the whole process group: connections are accepted by the kernel, nothing answers,
// exactly a hung or overloaded extender.
func (tp *topoplace) pause() {
	if err := syscall.Kill(-tp.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		tp.t.Fatalf("SIGSTOP topoplace: %v", err)
	}
	tp.paused = true
}

func (tp *topoplace) resume() {
	if err := syscall.Kill(-tp.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		tp.t.Fatalf("SIGCONT topoplace: %v", err)
	}
	tp.paused = false
}

func (tp *topoplace) log() string {
	text := tp.fullLog()
	if len(text) > 6000 {
		text = "...\n" + text[len(text)-6000:]
	}
	return text
}

// fullLog is the whole log, for what a test counts or looks for: log's last 6,000 characters, for a
// failure's message, move as tracebacks come in, and a count over them once went down while the
// event it counted happened (TestLargeConfServerHungMidSession, session 13).
func (tp *topoplace) fullLog() string {
	data, _ := os.ReadFile(tp.logPath)
	return string(data)
}

// status is topoplace's GET /status: what its last session planned.
type status struct {
	SessionOpen  bool               `json:"sessionOpen"`
	Jobs         int                `json:"jobs"`
	GpuTasks     int                `json:"gpuTasks"`
	Solved       bool               `json:"solved"`
	SolverStatus string             `json:"solverStatus"`
	PlacedJobs   []string           `json:"placedJobs"`
	UnplacedJobs map[string]string  `json:"unplacedJobs"`
	Error        string             `json:"error"`
	Warnings     []string           `json:"warnings"`
	OffPlan      []string           `json:"offPlan"`
	Refused      []string           `json:"refused"` // planned nodes Volcano's predicates refused
	OpenMs       float64            `json:"openMs"`
	Reused       bool               `json:"reused"`
	Calls        map[string]int     `json:"calls"`  // this session's calls, by verb
	CallMs       map[string]float64 `json:"callMs"` // their server time
	FullReads    int                `json:"predicateFullReads"`
	Declined     bool               `json:"declined"`
	Pid          int                `json:"pid"` // the serving process (under --standby, its child)
}

// healthy: /healthz answers 200 (a serving process with its solver ready, not the standby).
func (tp *topoplace) healthy() bool {
	resp, err := http.Get(tp.url() + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (tp *topoplace) status() status {
	tp.t.Helper()
	resp, err := http.Get(tp.url() + "/status")
	if err != nil {
		tp.t.Fatalf("GET /status: %v", err)
	}
	defer resp.Body.Close()
	var s status
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		tp.t.Fatalf("GET /status: %v", err)
	}
	return s
}

func (s status) String() string {
	b, _ := json.Marshal(s)
	return strings.TrimSpace(string(b))
}

// explain is topoplace's own account, for failure messages.
func (tp *topoplace) explain() string {
	return fmt.Sprintf("topoplace status: %v\ntopoplace log:\n%s", tp.status(), tp.log())
}

package gosched

import (
	"flag"
	"io"
	"os"
	"testing"

	"k8s.io/klog/v2"

	"volcano.sh/volcano/pkg/scheduler/metrics"
)

// TestMain keeps Volcano's own logging (klog: every failed extender call is a warning) out of the
// test output unless GOSCHED_KLOG=1, when it goes to stderr as vc-scheduler writes it.
func TestMain(m *testing.M) {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	if os.Getenv("GOSCHED_KLOG") == "" {
		_ = fs.Set("logtostderr", "false")
		_ = fs.Set("alsologtostderr", "false")
		_ = fs.Set("stderrthreshold", "FATAL")
		klog.SetOutput(io.Discard)
	}
	// vc-scheduler initialises the Kubernetes scheduler metrics its predicates report to (in
	// v1.14.1 the inter-pod affinity PreFilter dereferences them), as Volcano's own uthelper does.
	metrics.InitKubeSchedulerRelatedMetrics()
	os.Exit(m.Run())
}

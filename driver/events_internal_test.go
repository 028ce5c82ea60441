package driver

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/assert"
	"golang.org/x/time/rate"
	"k8s.io/client-go/kubernetes/fake"
)

// TestEventsBounded: at most maxPending Events wait; beyond that one is
// dropped, the log says so once, and Close counts it with those waiting.
func TestEventsBounded(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(_, args string) {
		mu.Lock()
		lines = append(lines, args)
		mu.Unlock()
	}, funcr.Options{})
	// The one token is spent: the next comes in eleven days, so nothing
	// is handed over.
	limiter := rate.NewLimiter(1e-6, 1)
	limiter.Allow()
	r := newRecorder(fake.NewClientset(), "test", limiter, log)
	for i := range maxPending + 10 {
		r.warn(Sandbox{Namespace: "a", Name: fmt.Sprintf("sb-%d", i)}, "StaleFence", "Suspend", "note")
	}
	r.shutdown()
	r.shutdown()
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{
		fmt.Sprintf(`"level"=0 "msg"="dropping Events: too many wait to be written" "waiting"=%d`, maxPending),
		fmt.Sprintf(`"level"=0 "msg"="driver closed: dropped Events not yet written" "count"=%d`, maxPending+10),
	}, lines, strings.Join(lines, "\n"))
}

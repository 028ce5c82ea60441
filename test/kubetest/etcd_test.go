package kubetest

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCompactEtcd: after CompactEtcd, etcd refuses to read at a revision
// before the one it returned; before, it read there. Compacting to a
// revision already compacted is no error.
func TestCompactEtcd(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("needs kube-apiserver and etcd: KUBEBUILDER_ASSETS is not set; `make test` builds them and sets it")
	}
	e := Start()
	t.Cleanup(func() {
		if err := e.Stop(); err != nil {
			t.Error(err)
		}
	})
	if e.err != nil {
		t.Fatal(e.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client := &http.Client{Timeout: time.Minute}
	readAt := func(rev int64) error {
		return etcdCall(ctx, client, e.cp.etcdURL+"/v3/kv/range", map[string]any{"key": "AA==", "limit": 1, "revision": strconv.FormatInt(rev, 10)}, nil)
	}
	// The API server has written since etcd started: revision 2 exists.
	if err := readAt(2); err != nil {
		t.Fatalf("before compacting, reading at revision 2: %v", err)
	}
	rev, err := e.CompactEtcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rev <= 2 {
		t.Fatalf("compacted to revision %d, want more than 2", rev)
	}
	err = readAt(rev - 1)
	if err == nil || !strings.Contains(err.Error(), "compacted") {
		t.Fatalf("reading at revision %d after compacting to %d: %v, want etcd's \"required revision has been compacted\"", rev-1, rev, err)
	}
	if err := readAt(rev); err != nil {
		t.Fatalf("reading at the compacted-to revision %d: %v", rev, err)
	}
	// Compacting where it already is finds nothing to do: no error.
	if err := compactTo(ctx, client, e.cp.etcdURL, rev-1); err != nil {
		t.Fatalf("compacting to revision %d, already compacted to %d: %v", rev-1, rev, err)
	}
	if _, err := (&Env{}).CompactEtcd(ctx); err == nil {
		t.Error("CompactEtcd without a control plane: no error")
	}
}

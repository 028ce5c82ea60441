package kubeadapter_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
)

// TestWatchCutShortEndsQuietly: a watch whose connection ends in the
// middle of its stream, as when the API server behind it is killed, ends
// with no error event, as it does in stock client-go. The reflector then
// watches again from the last resourceVersion it saw; an error event
// would make it list everything again. Before the stack handed client-go
// the io.ErrUnexpectedEOF of the cut body as the sentinel itself, it
// handed pooltrace's annotated error, which client-go's watch decoder
// does not take for a lost connection: the watch ended with an error
// event ("unable to decode an event from the watch stream: on new
// connection ...: unexpected EOF"), and every informer on a lost
// connection listed again.
func TestWatchCutShortEndsQuietly(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "true", r.URL.Query().Get("watch"))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"7"}}}`+"\n")
		rc := http.NewResponseController(w)
		assert.NoError(t, rc.Flush())
		// The chunked body ends without its last chunk.
		conn, _, err := rc.Hijack()
		if assert.NoError(t, err) {
			_ = conn.Close()
		}
	}))
	defer srv.Close()
	tests := []struct {
		name  string
		apply bool
	}{
		{name: "stock client-go"},
		{name: "kubewire", apply: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := &rest.Config{Host: srv.URL}
			if tt.apply {
				require.NoError(t, kubeadapter.Apply(cfg))
			}
			cs, err := kubernetes.NewForConfig(cfg)
			require.NoError(t, err)
			w, err := cs.CoreV1().ConfigMaps("ns").Watch(context.Background(), metav1.ListOptions{ResourceVersion: "6"})
			require.NoError(t, err)
			defer w.Stop()
			var got []watch.EventType
			for e := range w.ResultChan() {
				got = append(got, e.Type)
				if e.Type == watch.Error {
					t.Logf("error event: %v", e.Object)
				}
			}
			assert.Equal(t, []watch.EventType{watch.Added}, got, "the event, then the end of the watch, with no error event")
		})
	}
}

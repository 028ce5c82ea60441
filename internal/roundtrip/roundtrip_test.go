package roundtrip_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/internal/roundtrip"
)

// closer is a request body that reports its Close.
type closer struct{ closed func() }

func (closer) Read([]byte) (int, error) { return 0, io.EOF }
func (c closer) Close() error           { c.closed(); return nil }

func TestCloseRequestBody(t *testing.T) {
	roundtrip.CloseRequestBody(nil)
	closed := false
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/", closer{func() { closed = true }})
	require.NoError(t, err)
	roundtrip.CloseRequestBody(req)
	assert.True(t, closed)
}

func TestIsUpgrade(t *testing.T) {
	tests := []struct {
		give []string
		want bool
	}{
		{nil, false},
		{[]string{"keep-alive"}, false},
		{[]string{"Upgrade"}, true},
		{[]string{"keep-alive, upgrade"}, true},
		{[]string{"close", "UPGRADE"}, true},
		{[]string{"upgrades"}, false},
	}
	for _, tt := range tests {
		req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
		require.NoError(t, err)
		if tt.give != nil {
			req.Header["Connection"] = tt.give
		}
		assert.Equal(t, tt.want, roundtrip.IsUpgrade(req), "%q", tt.give)
	}
}

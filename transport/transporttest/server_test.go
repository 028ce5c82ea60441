package transporttest_test

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/transport/transporttest"
)

// TestUpgradeServerStopsWithTest: a client that never closes its upgraded
// connection does not keep the server's goroutine past the test (goleak in
// TestMain would report it): the server closes the connection when the
// test that started it ends.
func TestUpgradeServerStopsWithTest(t *testing.T) {
	var conn net.Conn
	var br *bufio.Reader
	if !t.Run("leaves the connection open", func(t *testing.T) {
		u := transporttest.NewUpgradeServer(t)
		var err error
		conn, err = net.Dial("tcp", strings.TrimPrefix(u, "http://"))
		require.NoError(t, err)
		_, err = conn.Write([]byte("POST /exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"))
		require.NoError(t, err)
		br = bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	}) {
		return
	}
	defer conn.Close()
	// A hang guard, not a measurement: the server closes at once.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	_, err := br.ReadByte()
	assert.ErrorContains(t, err, "EOF", "the server closed the upgraded connection when its test ended")
}

// TestUpgradeClosesWithTest: the body Upgrade returns is closed when the
// test ends, for a test that fails before it closes it.
func TestUpgradeClosesWithTest(t *testing.T) {
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	u := transporttest.NewUpgradeServer(t)
	var rwc interface{ Write([]byte) (int, error) }
	if !t.Run("leaves the body open", func(t *testing.T) {
		rwc = transporttest.Upgrade(t, base, u)
	}) {
		return
	}
	_, err := rwc.Write([]byte("hello\n"))
	assert.Error(t, err, "the body was closed when the subtest ended")
}

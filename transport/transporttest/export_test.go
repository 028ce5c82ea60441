package transporttest

import (
	"os"
	"time"
)

// A child of TestSuiteCatches runs the suite over a middleware that breaks
// it, so that what must happen never does: it waits a second for it, not
// the patience a loaded machine needs for what does happen.
func init() {
	if os.Getenv(BrokenEnv) != "" {
		patience = time.Second
	}
}

// BrokenEnv names the broken middleware a child of TestSuiteCatches runs
// the suite over.
const BrokenEnv = "TRANSPORTTEST_BROKEN"

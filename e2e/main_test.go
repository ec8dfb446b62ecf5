//go:build e2e

package e2e

import (
	"os"
	"testing"

	"airgapcoder/coderd/coderdtest"
)

func TestMain(m *testing.M) { os.Exit(coderdtest.RunMain(m)) }

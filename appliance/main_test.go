package appliance_test

import (
	"os"
	"testing"

	"airgapcoder/coderd/coderdtest"
)

func TestMain(m *testing.M) { os.Exit(coderdtest.RunMain(m)) }

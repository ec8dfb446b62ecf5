package supportbundle_test

import (
	"testing"

	"go.uber.org/goleak"

	"airgapcoder/coderd/coderdtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(coderdtest.Main(m), coderdtest.LeakOptions()...) }

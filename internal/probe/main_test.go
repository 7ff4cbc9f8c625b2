package probe

import (
	"testing"

	"github.com/leadintake/leadintake/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

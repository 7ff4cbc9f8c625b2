package admin_test

import (
	"testing"

	"github.com/leadintake/leadintake/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

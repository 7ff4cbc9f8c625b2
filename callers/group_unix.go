//go:build unix

package callers

import (
	"io/fs"
	"os"
	"syscall"
)

// inOwnGroup reports whether the file fi belongs to a group of this
// process (its effective group or one of its supplementary groups).
func inOwnGroup(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	gid := int(st.Gid)
	if gid == os.Getegid() {
		return true
	}
	groups, err := os.Getgroups()
	if err != nil {
		return false
	}
	for _, g := range groups {
		if g == gid {
			return true
		}
	}
	return false
}

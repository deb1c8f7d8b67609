//go:build linux

package convert

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// placeFile puts src at dst without copying its bytes: a hard link, or
// failing that (another filesystem, or links refused) a reflink, which
// shares the blocks copy-on-write on btrfs and XFS. It returns the error of
// the last attempt when neither works, and the caller then copies.
func placeFile(src, dst string) (Action, error) {
	lerr := os.Link(src, dst)
	if lerr == nil {
		return Link, nil
	}
	s, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer s.Close()
	d, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	cerr := unix.IoctlFileClone(int(d.Fd()), int(s.Fd()))
	if err := d.Close(); cerr == nil {
		cerr = err
	}
	if cerr == nil {
		return Reflink, nil
	}
	os.Remove(dst)
	return "", fmt.Errorf("hard link: %v; reflink: %v", lerr, cerr)
}

// sameDevice reports whether two paths are on one filesystem, where a hard
// link costs no space.
func sameDevice(a, b string) bool {
	var sa, sb unix.Stat_t
	return unix.Stat(a, &sa) == nil && unix.Stat(b, &sb) == nil && sa.Dev == sb.Dev
}

// freeBytes is the space an unprivileged user may still fill at dir, or -1
// when it cannot be told.
func freeBytes(dir string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// exchange swaps two paths atomically, so that replacing a model never
// leaves a moment with no model at its path.
func exchange(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}

package badgervault

import (
	"os"
	"syscall"
)

// freeBytes reports the bytes an unprivileged writer may still allocate on
// dir's file system (f_bavail: root's reserved blocks are not counted, so a
// root process stops before an ext4 disk is truly full).
func freeBytes(dir string) (int64, bool, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false, err
	}
	return int64(st.Bavail) * st.Bsize, true, nil
}

// allocateFile creates path with size bytes of allocated blocks (not a
// sparse file: deleting it must free real space), synced.
func allocateFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

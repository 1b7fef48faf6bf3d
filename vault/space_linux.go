package vault

import "syscall"

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

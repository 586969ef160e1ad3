package conns

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Transport is the connection under c's TLS, if any (else c): closing it
// sends no close_notify, a write that can wait on a peer that stopped
// reading.
func Transport(c net.Conn) net.Conn {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok {
		return nc.NetConn()
	}
	return c
}

// RawConn is c's socket, through TLS and the listener's wrapper.
func RawConn(c net.Conn) (syscall.RawConn, bool) {
	sc, ok := Transport(c).(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	return rc, err == nil
}

// FD is c's descriptor, through TLS and the listener's wrapper.
func FD(c net.Conn) (int32, bool) {
	rc, ok := RawConn(c)
	if !ok {
		return 0, false
	}
	fd := int32(-1)
	_ = rc.Control(func(f uintptr) { fd = int32(f) })
	return fd, fd >= 0
}

// ArmOnce watches fd in the epoll set epfd for one event — something to
// read, or the peer's close — reported with seq in the event's Pad (which
// tells a registration from a later one of a reused descriptor). A
// descriptor stays in the set after its event, disarmed, until its file
// is closed, so it is armed again with MOD, added only the first time.
func ArmOnce(epfd int, fd, seq int32) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: fd, Pad: seq}
	err := unix.EpollCtl(epfd, unix.EPOLL_CTL_MOD, int(fd), &ev)
	if errors.Is(err, unix.ENOENT) {
		err = unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	}
	return err
}

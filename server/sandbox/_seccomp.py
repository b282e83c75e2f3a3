"""Writes the sandbox's seccomp filter, as classic BPF for this machine's architecture, to stdout.

Run by the server once at start with the system's python3 (Debian's python3-seccomp: the bindings of
libseccomp, the library Flatpak and bubblewrap's users build their filters with); bubblewrap loads the
bytes with --seccomp. Every rule is in Flatpak's spirit (flatpak-run.c, setup_seccomp): the default is to
allow, and the calls listed here fail with an errno the program can handle. A syscall of another
architecture (x32, i386 on x86-64) kills the process: libseccomp's default for foreign architectures.
"""
import errno
import sys

import seccomp

EPERM = errno.EPERM
ENOSYS = errno.ENOSYS

# Calls that change what the sandbox is: mounts, roots and namespaces (a jailed process must never make a
# user namespace, where it would be root again, nor enter another process's namespaces).
NAMESPACES_AND_MOUNTS = [
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
]
# Kernel attack surface a service never needs: other processes' memory, the kernel keyring, eBPF,
# performance counters (side channels), userfaultfd (a common exploit primitive), io_uring (a long list of
# privilege escalations; Docker's default profile refuses it too), file handles (the "shocker" escape),
# the kernel log, process accounting, quotas and old 32-bit compatibility calls.
KERNEL_SURFACE = [
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "keyctl", "add_key", "request_key",
    "bpf", "perf_event_open", "userfaultfd",
    "name_to_handle_at", "open_by_handle_at",
    "syslog", "acct", "quotactl", "uselib", "lookup_dcookie",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "swapon", "swapoff", "reboot", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
]
# Answered "not implemented" so that libc falls back to calls the filter can inspect (clone3 passes its
# flags in memory, out of a filter's reach) or to plain I/O.
NOT_IMPLEMENTED = ["clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"]

CLONE_NAMESPACE_FLAGS = [
    0x00000080,  # CLONE_NEWTIME
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
]
# TIOCSTI pushes characters into a terminal's input (typed into the shell that started the server, were
# it a terminal); TIOCLINUX can do the same on a virtual console.
TERMINAL_IOCTLS = [0x5412, 0x541C]
# Socket families other than Unix, IPv4, IPv6 and netlink (which libc's address lookup uses): raw packet
# sockets, vsock to the hypervisor, the kernel's crypto API and old protocols with a long CVE record.
ALLOWED_FAMILIES = {1, 2, 10, 16}
LAST_FAMILY = 45


def build() -> seccomp.SyscallFilter:
    f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
    for name in NAMESPACES_AND_MOUNTS + KERNEL_SURFACE:
        try:
            f.add_rule(seccomp.ERRNO(EPERM), name)
        except (RuntimeError, ValueError):
            pass  # not a call of this architecture (umount on arm64, ...)
    for name in NOT_IMPLEMENTED:
        try:
            f.add_rule(seccomp.ERRNO(ENOSYS), name)
        except (RuntimeError, ValueError):
            pass
    for flag in CLONE_NAMESPACE_FLAGS:
        f.add_rule(seccomp.ERRNO(EPERM), "clone", seccomp.Arg(0, seccomp.MASKED_EQ, flag, flag))
    for request in TERMINAL_IOCTLS:
        f.add_rule(seccomp.ERRNO(EPERM), "ioctl", seccomp.Arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, request))
    for family in range(LAST_FAMILY + 1):
        if family not in ALLOWED_FAMILIES:
            f.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), "socket", seccomp.Arg(0, seccomp.EQ, family))
    f.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), "socket", seccomp.Arg(0, seccomp.GT, LAST_FAMILY))
    return f


if __name__ == "__main__":
    build().export_bpf(sys.stdout.buffer)
    sys.stdout.flush()

// Stands in for glibc's <sys/single_threaded.h> (2.32 and later) in the Python extension's build
// (setup.py puts csrc/compat first on the include path). libstdc++'s headers include it when it
// exists and then read the glibc 2.32 variable __libc_single_threaded to skip atomic reference
// counts while a process has one thread; reading it would make the binary need glibc 2.32, too
// new for manylinux_2_28 (csrc/compat/glibc_2_28.h). Here it is a constant "threads may exist",
// so reference counts are always atomic, as libstdc++ does on an older glibc: the same results,
// only without that shortcut in single-threaded programs.
#pragma once

static const char flip_loss_libc_single_threaded = 0;
#define __libc_single_threaded flip_loss_libc_single_threaded

// The CPU kernels' only link to a host's interruption mechanism: long loops (the HDR exposures)
// call poll_interrupt() between steps. A host that wants them stoppable installs a check that
// throws to stop (the Python module's check runs Python's signal handlers and stops the op with the
// exception one raised, kept per thread for flip_loss to re-raise); without one, polling does
// nothing. Called on the op's calling thread only, never inside parallel_for. An op whose kernel
// polls is listed in flip_loss/op_registration.py's INTERRUPTIBLE_OPS, whose kernels take the
// exception back.
#pragma once

namespace flip {
namespace cpu {

using InterruptCheck = void (*)();

// Installs `check` for the whole process (nullptr removes it); thread-safe.
void set_interrupt_check(InterruptCheck check);

// Runs the installed check, if any; whatever it throws leaves the kernel (which holds its scratch
// memory in RAII workspaces, so nothing leaks).
void poll_interrupt();

}  // namespace cpu
}  // namespace flip

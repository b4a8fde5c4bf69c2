#include "agent/clone_on_stack.h"

#ifdef CRUN_CLONE_ON_STACK
#include <sys/syscall.h>

static_assert(SYS_clone3 == 435 && SYS_exit == 60, "x86-64 system call numbers");

// The parent gets the child's pid or -errno; the child, on args->stack, runs fn(arg) and exits
// with its result.
extern "C" long crun_clone3_on_stack(clone_args* args, std::size_t size, int (*fn)(void*), void* arg);
asm(".text\n"
    ".globl crun_clone3_on_stack\n"
    ".hidden crun_clone3_on_stack\n"
    ".type crun_clone3_on_stack, @function\n"
    "crun_clone3_on_stack:\n"
    "  mov %rdx, %r8\n"  // fn and arg, in registers the system call keeps (and the child inherits)
    "  mov %rcx, %r9\n"
    "  mov $435, %eax\n"  // clone3
    "  syscall\n"
    "  test %rax, %rax\n"
    "  jz 1f\n"
    "  ret\n"  // the parent: the child's pid, or the error
    "1:\n"
    "  xor %ebp, %ebp\n"  // the child, on its own stack: the end of any backtrace
    "  mov %r9, %rdi\n"
    "  call *%r8\n"
    "  mov %eax, %edi\n"
    "  mov $60, %eax\n"  // exit
    "  syscall\n"
    "  hlt\n"
    ".size crun_clone3_on_stack, .-crun_clone3_on_stack\n");

namespace crun {

long clone_on_stack(clone_args* args, std::size_t size, int (*fn)(void*), void* arg) {
  return crun_clone3_on_stack(args, size, fn, arg);
}

}  // namespace crun
#endif

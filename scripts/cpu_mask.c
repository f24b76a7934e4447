/* cpu_mask.so: run a process natively with a smaller x86 ISA than the CPU has, by editing what CPUID says.
 *
 *   CPU_MASK=avx2 LD_PRELOAD=.../cpu_mask.so python ...      (scripts/with_isa.sh builds and sets this up)
 *
 * Libraries pick their kernels from CPUID once, at load: ONNX Runtime's MLAS, NumPy, PyTorch (cpuinfo and
 * oneDNN), OpenBLAS. With Linux's CPUID faulting (arch_prctl ARCH_SET_CPUID, 0; /proc/cpuinfo flag
 * cpuid_fault) every CPUID instruction of this process traps (SIGSEGV); the handler below runs the real
 * CPUID, clears the features above the chosen level and steps over the instruction. Kernels then run at
 * full native speed on the chosen ISA's code paths; only the CPUID calls (a few hundred at start-up) pay.
 *
 * Levels (CPU_MASK): avx2 (AVX2 + FMA3, no AVX-512/AMX/AVX-VNNI/AVX10: an AMD EPYC Zen 2/3, or a Zen 4 VM
 * whose hypervisor hides AVX-512), avx (no AVX2, FMA, F16C either), sse4 (no AVX at all).
 *
 * Without CPUID faulting (CPU_MASK_TRAPS=1, set by with_isa.sh there): only patched copies of the libraries
 * trap (scripts/isa_patch.py replaced the first byte of each CPUID / XGETBV in them by INT3, so the site reads
 * CC A2 / CC 01 D0); the SIGTRAP handler below emulates those the same way, XGETBV with the AVX-512 state
 * bits cleared too (MLAS checks the OS's support there). Everything else runs the real CPUID.
 *
 * Limits: glibc's own string functions chose theirs before this library loads (set GLIBC_TUNABLES to match,
 * as with_isa.sh does). The handler stays first: sigaction()/signal() for its signal (SIGSEGV, or SIGTRAP in
 * the trap mode) are interposed and chained behind it (Python's faulthandler installs one for SIGSEGV), so
 * other faults still reach their handlers. A CPUID executed while that signal is blocked kills the process
 * (the kernel cannot deliver the trap).
 */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define BIT(n) (1u << (n))

static int level = 0; /* 0: unmasked, 1: avx2, 2: avx, 3: sse4 */
static int trapsig = SIGSEGV; /* SIGSEGV: CPUID faulting; SIGTRAP: patched INT3 sites (CPU_MASK_TRAPS=1) */
static struct sigaction chained; /* the handler the program installed for trapsig (SIG_DFL until it does) */
static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);

static long set_cpuid(int enabled) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, enabled); }

static void mask(uint32_t leaf, uint32_t sub, uint32_t r[4]) { /* r: eax, ebx, ecx, edx */
    if (leaf == 1 && level >= 2) {
        r[2] &= ~(BIT(12) | BIT(29)); /* FMA, F16C */
        if (level >= 3) r[2] &= ~BIT(28); /* AVX */
    }
    if (leaf == 7 && sub == 0) {
        r[1] &= ~(BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31));
        /* EBX: AVX512F DQ IFMA PF ER CD BW VL */
        r[2] &= ~(BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14));
        /* ECX: AVX512_VBMI VBMI2 VNNI BITALG VPOPCNTDQ */
        r[3] &= ~(BIT(2) | BIT(3) | BIT(8) | BIT(22) | BIT(23) | BIT(24) | BIT(25));
        /* EDX: AVX512_4VNNIW 4FMAPS VP2INTERSECT, AMX-BF16, AVX512_FP16, AMX-TILE, AMX-INT8 */
        if (level >= 2) r[1] &= ~BIT(5); /* AVX2 */
    }
    if (leaf == 7 && sub == 1) {
        r[0] &= ~(BIT(4) | BIT(5) | BIT(21) | BIT(23)); /* AVX-VNNI, AVX512_BF16, AMX-FP16, AVX-IFMA */
        r[3] &= ~(BIT(4) | BIT(5) | BIT(10) | BIT(19)); /* AVX-VNNI-INT8, AVX-NE-CONVERT, AVX-VNNI-INT16, AVX10 */
    }
    if (leaf == 0x1d || leaf == 0x1e || leaf == 0x24) r[0] = r[1] = r[2] = r[3] = 0; /* AMX tiles, AVX10 */
}

static void emulate_cpuid(greg_t *g) {
    uint32_t r[4], leaf = (uint32_t)g[REG_RAX], sub = (uint32_t)g[REG_RCX];
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
    mask(leaf, sub, r);
    g[REG_RAX] = r[0];
    g[REG_RBX] = r[1];
    g[REG_RCX] = r[2];
    g[REG_RDX] = r[3];
}

static void chain(int sig, siginfo_t *info, void *ctx) {
    /* Not ours: the program's own handler, else the default action (the instruction faults again). */
    if (chained.sa_flags & SA_SIGINFO) {
        chained.sa_sigaction(sig, info, ctx);
    } else if (chained.sa_handler != SIG_DFL && chained.sa_handler != SIG_IGN) {
        chained.sa_handler(sig);
    } else {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        real_sigaction(sig, &dfl, NULL);
        if (sig == SIGTRAP) raise(SIGTRAP); /* (a trap does not repeat by itself: the INT3 is behind us) */
    }
}

static void on_trap(int sig, siginfo_t *info, void *ctx) {
    ucontext_t *uc = (ucontext_t *)ctx;
    greg_t *g = uc->uc_mcontext.gregs;
    const uint8_t *ip = (const uint8_t *)g[REG_RIP]; /* after the INT3 */
    if (info->si_code != SI_KERNEL) { /* not an INT3 (kill, raise, a debugger's single step): not ours */
        chain(sig, info, ctx);
        return;
    }
    if (ip[-1] == 0xcc && ip[0] == 0xa2) { /* a patched CPUID */
        emulate_cpuid(g);
        g[REG_RIP] += 1;
        return;
    }
    if (ip[-1] == 0xcc && ip[0] == 0x01 && ip[1] == 0xd0) { /* a patched XGETBV */
        uint32_t lo, hi, xcr = (uint32_t)g[REG_RCX];
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(xcr));
        if (xcr == 0) lo &= ~(BIT(5) | BIT(6) | BIT(7)); /* opmask, ZMM0-15 upper halves, ZMM16-31: AVX-512 */
        if (xcr == 0 && level >= 3) lo &= ~BIT(2); /* YMM upper halves: AVX */
        g[REG_RAX] = lo;
        g[REG_RDX] = hi;
        g[REG_RIP] += 2;
        return;
    }
    chain(sig, info, ctx);
}

static void on_segv(int sig, siginfo_t *info, void *ctx) {
    ucontext_t *uc = (ucontext_t *)ctx;
    greg_t *g = uc->uc_mcontext.gregs;
    const uint8_t *ip = (const uint8_t *)g[REG_RIP];
    if (info->si_code == SI_KERNEL && ip[0] == 0x0f && ip[1] == 0xa2) { /* CPUID */
        set_cpuid(1);
        emulate_cpuid(g);
        set_cpuid(0);
        g[REG_RIP] += 2;
        return;
    }
    chain(sig, info, ctx);
}

static void install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = trapsig == SIGTRAP ? on_trap : on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    real_sigaction(trapsig, &sa, NULL);
}

int sigaction(int signum, const struct sigaction *act, struct sigaction *old) {
    if (!real_sigaction) real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    if (signum != trapsig || level == 0) return real_sigaction(signum, act, old);
    if (old) *old = chained;
    if (act) chained = *act;
    return 0;
}

sighandler_t signal(int signum, sighandler_t handler) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(signum, &sa, &old) != 0) return SIG_ERR;
    return old.sa_handler;
}

__attribute__((constructor)) static void cpu_mask_init(void) {
    const char *want = getenv("CPU_MASK");
    real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    if (!want || !*want || !strcmp(want, "none")) return;
    if (!strcmp(want, "avx2")) level = 1;
    else if (!strcmp(want, "avx")) level = 2;
    else if (!strcmp(want, "sse4")) level = 3;
    else {
        fprintf(stderr, "cpu_mask: CPU_MASK=%s: allowed values are avx2, avx, sse4, none\n", want);
        _exit(2);
    }
    memset(&chained, 0, sizeof chained);
    chained.sa_handler = SIG_DFL;
    const char *traps = getenv("CPU_MASK_TRAPS");
    if (traps && !strcmp(traps, "1")) { /* patched libraries trap; CPUID itself stays real */
        trapsig = SIGTRAP;
        install();
        return;
    }
    install();
    if (set_cpuid(0) != 0) {
        fprintf(stderr, "cpu_mask: this kernel or CPU cannot trap CPUID (arch_prctl ARCH_SET_CPUID failed; "
                        "/proc/cpuinfo lacks cpuid_fault), so CPU_MASK=%s cannot take effect\n", want);
        _exit(2);
    }
}

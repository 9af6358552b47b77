// SPDX-License-Identifier: BSD-3-Clause
// SPDX-License-Identifier: Apache-2.0
// Start-up for the MPS3 AN547 (Cortex-M55) under QEMU: vector table, reset
// (FPU/MVE on, fault handlers on, .bss zeroed, semihosting, static
// constructors, main, exit) and one fault handler that prints the fault
// registers and exits, so a crash ends the run instead of hanging it.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern uint32_t __StackTop;
extern uint8_t __bss_start__[];
extern uint8_t __bss_end__[];
extern void initialise_monitor_handles(void);
extern void __libc_init_array(void);
extern int main(void);

// Exit code of a run that faulted (the runner's own codes are below it).
#define FAULT_EXIT_CODE 3

#define REG32(a) (*(volatile uint32_t*)(a))
#define SCB_CCR REG32(0xE000ED14u)
#define SCB_SHCSR REG32(0xE000ED24u)
#define SCB_CFSR REG32(0xE000ED28u)
#define SCB_HFSR REG32(0xE000ED2Cu)
#define SCB_MMFAR REG32(0xE000ED34u)
#define SCB_BFAR REG32(0xE000ED38u)
#define SCB_CPACR REG32(0xE000ED88u)
#define SYST_CSR REG32(0xE000E010u)
#define SYST_RVR REG32(0xE000E014u)
#define SYST_CVR REG32(0xE000E018u)
#define SYST_RELOAD 0xFFFFFFu

void Reset_Handler(void);
void Fault_Handler(void);
void Unexpected_Handler(void);
void SysTick_Handler(void);

// -nostartfiles: no crti/crtn, so __libc_init_array's _init/_fini are ours;
// static destructors register through __aeabi_atexit with __dso_handle.
void _init(void) {}
void _fini(void) {}
void* __dso_handle = 0;

__attribute__((section(".vectors"), used)) static void (*const vectors[])(void) = {
    (void (*)(void))(&__StackTop),
    Reset_Handler,
    Fault_Handler, /* NMI */
    Fault_Handler, /* HardFault */
    Fault_Handler, /* MemManage */
    Fault_Handler, /* BusFault */
    Fault_Handler, /* UsageFault */
    Fault_Handler, /* SecureFault */
    0,
    0,
    0,
    Unexpected_Handler, /* SVCall */
    Unexpected_Handler, /* DebugMonitor */
    0,
    Unexpected_Handler, /* PendSV */
    SysTick_Handler,
};

// A 64-bit tick count: SysTick (24 bits, processor clock) plus its wraps. Under QEMU with
// `-icount shift=0` the processor clock is QEMU's virtual clock, which advances by a fixed step
// per executed instruction, so ticks count instructions (the runner calibrates the ratio).
static volatile uint32_t systick_wraps;

void SysTick_Handler(void) {
  ++systick_wraps;
}

void ethosu_ng_fw_ticks_start(void) {
  SYST_RVR = SYST_RELOAD;
  SYST_CVR = 0;
  systick_wraps = 0;
  SYST_CSR = 7u; /* processor clock, interrupt on wrap, enabled */
  while (SYST_CVR == 0) {
    /* the counter loads its reload value on its first tick; read before that, it is 0 */
  }
}

uint64_t ethosu_ng_fw_ticks(void) {
  uint32_t wraps, value;
  do { /* a wrap between the two reads would pair the old count with the new value */
    wraps = systick_wraps;
    value = SYST_CVR;
  } while (wraps != systick_wraps);
  return (uint64_t)wraps * (SYST_RELOAD + 1u) + (SYST_RELOAD - value);
}

void Reset_Handler(void) {
  // CP10/CP11 (FPU and MVE) full access before any FP or vector instruction.
  SCB_CPACR |= (0xFu << 20);
  __asm volatile("dsb\n isb" ::: "memory");
  // MemManage, BusFault, UsageFault, SecureFault get their own report instead
  // of escalating; division by zero traps instead of yielding 0.
  SCB_SHCSR |= (1u << 16) | (1u << 17) | (1u << 18) | (1u << 19);
  SCB_CCR |= (1u << 4);
  memset(__bss_start__, 0, (size_t)(__bss_end__ - __bss_start__));
  initialise_monitor_handles();
  __libc_init_array();
  exit(main());
}

// Called by Fault_Handler with the exception stack frame (r0-r3, r12, lr, pc, xpsr).
__attribute__((used)) static void fault_report(const uint32_t* frame, uint32_t exc_return) {
  uint32_t ipsr;
  __asm volatile("mrs %0, ipsr" : "=r"(ipsr));
  printf(
      "ethosu_ng_fw: FAULT exception %lu CFSR 0x%08lx HFSR 0x%08lx MMFAR 0x%08lx BFAR 0x%08lx "
      "PC 0x%08lx LR 0x%08lx EXC_RETURN 0x%08lx\n",
      (unsigned long)(ipsr & 0x1ffu), (unsigned long)SCB_CFSR, (unsigned long)SCB_HFSR,
      (unsigned long)SCB_MMFAR, (unsigned long)SCB_BFAR, (unsigned long)frame[6],
      (unsigned long)frame[5], (unsigned long)exc_return);
  fflush(stdout);
  _Exit(FAULT_EXIT_CODE);
}

__attribute__((naked)) void Fault_Handler(void) {
  __asm volatile(
      "tst lr, #4\n"
      "ite eq\n"
      "mrseq r0, msp\n"
      "mrsne r0, psp\n"
      "mov r1, lr\n"
      "b fault_report\n");
}

void Unexpected_Handler(void) {
  printf("ethosu_ng_fw: FAULT unexpected exception\n");
  _Exit(FAULT_EXIT_CODE);
}

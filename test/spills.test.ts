import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { checkNoSpills, KernelSpillError } from "../src/cuda/ptxas-report.js";

describe("checkNoSpills (the JIT's refusal of kernels that use local memory)", () => {
  test("a kernel without local memory passes", () => {
    assert.doesNotThrow(() => checkNoSpills("k", { numRegs: 255, localBytes: 0 }));
  });

  test("local memory is refused with the kernel, its registers, its local bytes and the advice", () => {
    assert.throws(
      () => checkNoSpills("vpps_m_cta2_rpw4", { numRegs: 128, localBytes: 96 }, "choose a smaller rpw"),
      (e: unknown) =>
        e instanceof KernelSpillError &&
        e.kernel === "vpps_m_cta2_rpw4" &&
        e.registers === 128 &&
        e.localBytes === 96 &&
        /^vpps_m_cta2_rpw4: uses 96 bytes of local memory per thread with 128 registers\/thread; expected 0 .*: choose a smaller rpw$/.test(
          e.message,
        ),
    );
  });

  test("without advice the message still says what to do", () => {
    assert.throws(() => checkNoSpills("k", { numRegs: 64, localBytes: 8 }), /give each thread less to hold/);
  });
});

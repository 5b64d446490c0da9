/**
 * The tile instructions' CUDA (tile, tile.xbar, tile.wbar): long operand lists computed as dense 64 × 64 blocks
 * from the master copy by any CTA, with the geometry checks that keep the routines and the script format in step.
 */
import { type VppsPlan, WARPS_PER_CTA } from "../plan/plan.js";
import { LIST_ENTRIES, OPCODES, Opcode, TILE } from "../script/format.js";
import { REDUCE_BLOCK_COLS, STAGE_ENTRY_WORDS, STAGE_FLOATS, STAGE_YBAR_FLOATS, tileMode } from "./staging.js";

/** Outputs per side of a tile block: 16 × 16 threads with 4 × 4 outputs each. */
const TILE_DIM = 64;
/** K of one staged chunk of a tile product. */
const TILE_K = 32;
/** Accumulators per thread (its 4 × 4 outputs); half of them sit behind each operand's staged chunk. */
const TILE_ACC = 16;
/** Words of the CUDA struct TileArgs, which a tile instruction keeps in s_ent. */
const TILE_ARGS_WORDS = 8;

/** Position of word `name` in an entry of list instruction `op` (script/format.ts fixes the layout). */
function entryWord(op: Opcode, name: string): number {
  const k = LIST_ENTRIES[op]?.indexOf(name) ?? -1;
  if (k < 0) throw new Error(`kernel template: ${OPCODES[op]!.mnemonic} entries have no word '${name}'`);
  return k;
}

/**
 * The tile routines fix the tile's geometry (16 × 16 threads of 4 × 4 outputs) and borrow the shared buffers of the
 * list instructions: entry words in s_gy, one operand's chunk and half of the accumulators in each of s_stage and
 * s_reduce.
 */
function checkTileShape(): void {
  const { entries, rows, cols, wbarEntries } = TILE;
  if (entries !== TILE_DIM || rows !== TILE_DIM || cols !== TILE_DIM) {
    throw new Error(
      `kernel template: tile routines compute ${TILE_DIM} x ${TILE_DIM} blocks; TILE has entries ${entries}, rows ${rows}, cols ${cols}`,
    );
  }
  const words = Math.max(
    ...[Opcode.Tile, Opcode.TileAcc, Opcode.TileXbar, Opcode.TileWbar].map((o) => LIST_ENTRIES[o]!.length),
  );
  if (LIST_ENTRIES[Opcode.TileAcc]!.join() !== LIST_ENTRIES[Opcode.Tile]!.join()) {
    throw new Error("kernel template: tile.acc entries must be tile's (y, x, b)");
  }
  if (TILE.splitCols % TILE_K !== 0) {
    throw new Error(`kernel template: TILE.splitCols (${TILE.splitCols}) must be a multiple of the chunk K ${TILE_K}`);
  }
  if (words * Math.max(entries, wbarEntries) > STAGE_YBAR_FLOATS) {
    throw new Error(
      `kernel template: ${wbarEntries} tile entries of ${words} words do not fit the ${STAGE_YBAR_FLOATS}-word s_gy`,
    );
  }
  if (TILE_ARGS_WORDS > STAGE_ENTRY_WORDS) {
    throw new Error(`kernel template: TileArgs (${TILE_ARGS_WORDS} words) exceeds s_ent (${STAGE_ENTRY_WORDS} words)`);
  }
  const threads = 32 * WARPS_PER_CTA;
  const need = TILE_K * TILE_DIM + (TILE_ACC / 2) * threads;
  if (need > Math.min(STAGE_FLOATS, 2 * WARPS_PER_CTA * REDUCE_BLOCK_COLS)) {
    throw new Error(
      `kernel template: a tile chunk and half the accumulators (${need} floats) exceed s_stage or s_reduce`,
    );
  }
}

/**
 * CUDA of the tile instructions (tile, tile.xbar, tile.wbar): 64 × 64 blocks of the products of long lists,
 * computed from the master copy of the weights by any CTA (the scheduler places them), so that a list of hundreds
 * of entries is a few dense tiles instead of hundreds of latency-bound rounds on the holders of the matrix. Not
 * specialised per matrix: the routines take the matrix's shape at run time (TileArgs), so the interpreter holds one
 * copy of each instead of one per matrix.
 */
export function tileRoutines(plan: VppsPlan): string {
  checkTileShape();
  const mode = tileMode(plan);
  const F = (name: string) => entryWord(Opcode.Tile, name);
  const X = (name: string) => entryWord(Opcode.TileXbar, name);
  const G = (name: string) => entryWord(Opcode.TileWbar, name);
  const fw = LIST_ENTRIES[Opcode.Tile]!.length;
  const xw = LIST_ENTRIES[Opcode.TileXbar]!.length;
  const gw = LIST_ENTRIES[Opcode.TileWbar]!.length;
  return `
// ---- tile instructions: dense 64 x 64 blocks of long lists' products, from the master copy ---------------------
//
// A tile is a small GEMM C[i][j] = sum_k A[i][k] B[k][j] with 64 x 64 outputs: thread t = (tx, ty) = (t % 16, t / 16)
// owns the 4 x 4 outputs i in [4ty, 4ty + 4), j in [4tx, 4tx + 4). K runs in chunks of kTileK staged in shared memory
// with BOTH operands k-major (S[k][i], S[k][j]): a thread reads its 4 values of A and of B for one k as two float4
// loads (3 shared wavefronts per warp per 16 FMAs, against 8 with scalar reads), so the products are bound by the
// FMAs, not by shared memory.
//
// Registers. The interpreter keeps the weights in registers across its whole loop; the tightest plans leave the
// interpreter a few dozen (255 - 176 at H = 512), and the first versions of these routines spilled there. Hence:
// - the accumulators live in shared memory between chunks, in registers only while a chunk's products run, so
//   loading a chunk holds none;
// - the instruction's operands and the matrix's shape live in shared memory too (TileArgs, in s_ent) and are read
//   again after each barrier, so that only the chunk counter is carried in a register across the chunk loop;
// - each routine reads the thread index itself through opaque_tid(), so that the few dozen shared and global
//   addresses derived from it are computed where they are used rather than hoisted out of the chunk loop and the
//   interpreter loop and held for the whole launch (measured: the difference between spilling and not).
// Shared memory. One operand's chunk (kTileChunk floats) and half of the accumulators (8 x kThreads) fill a
// 4096-float buffer exactly: A and accumulators 0-7 in s_stage, B and 8-15 in s_reduce; the entry words in s_gy.
// Chunk rows have no padding (there is no room); tile_at() swizzles instead.
// The master copy is not written before the end-of-batch update (after a grid barrier), so any CTA may read it.
constexpr int kTileEntries = ${TILE.entries}, kTileRows = ${TILE.rows}, kTileCols = ${TILE.cols}; // per tile (script.ts TILE)
constexpr int kTileWbarEntries = ${TILE.wbarEntries};  // entries of one tile.wbar (its K)
constexpr int kTileXbarRows = ${TILE.xbarRows};     // rows one tile.xbar sums over (its K)
constexpr int kTileSplitCols = ${TILE.splitCols};    // columns one tile.acc sums over (its K)
constexpr int kTileDim = ${TILE_DIM};          // outputs per side of a tile block
constexpr int kTileK = ${TILE_K};            // K of one staged chunk
constexpr int kTileChunk = kTileK * kTileDim;  // floats of one operand's staged chunk
constexpr int kTilePer = kTileChunk / kThreads; // elements of a chunk that one thread loads, per operand
constexpr int kTilePasses = ${mode.passes};       // passes of the product over a chunk (tileMode: by register headroom)
constexpr bool kTileFast = ${mode.fast};     // unrolled products, next chunk's loads in flight during them (tileMode)
static_assert(kThreads == 256 && kTileDim == 64 && kTileK % 8 == 0, "tile geometry: 16 x 16 threads of 4 x 4 outputs");
static_assert(kTileEntries == kTileDim && kTileRows == kTileDim && kTileCols == kTileDim, "tiles are square");

// Position of element (k, i) in a staged chunk: row k of 64 floats, its 4-float groups permuted by XOR with k % 8.
// A thread's float4 (i = 4x .. 4x + 3) stays contiguous and aligned; the along-k loader's stores of 8 consecutive k
// of one i fall into 8 different groups, hence different banks (without the swizzle: 8-way conflicts).
__device__ __forceinline__ int tile_at(int k, int i) {
  return k * kTileDim + (i ^ ((k & 7) << 2));
}

// The operands of the running tile instruction and the shape of its matrix, in shared memory (see "Registers").
// offset + rows * cols < 2^32 (checked by the generator): 32-bit offsets into the master copy and gradient buffer.
struct TileArgs {
  u32 offset, rows, cols; // matrix n
  u32 count, r0, c0;      // entries, first row, first column (0 where the opcode has no such operand)
  u32 bias, mixed;        // tile.wbar's bias gradient: the bbar all entries share (NONE: none), or mixed = 1
};
static_assert(sizeof(TileArgs) == 4 * ${TILE_ARGS_WORDS}, "TileArgs: the generator checks that it fits s_ent");

// This thread's accumulator q = 4 ii + jj: 0-7 behind A's chunk, 8-15 behind B's; consecutive threads, consecutive
// banks.
__device__ __forceinline__ float* tile_acc(float* sa, float* sb, int q, u32 tid) {
  return (q < 8 ? sa + q * kThreads : sb + (q - 8) * kThreads) + kTileChunk + tid;
}
// Accumulator row ii (q = 4 ii .. 4 ii + 3, kThreads apart) of this thread.
__device__ __forceinline__ float* tile_acc_row(float* sa, float* sb, int ii, u32 tid) {
  return (ii < 2 ? sa : sb) + kTileChunk + (ii & 1) * 4 * kThreads + tid;
}

template <class M> __device__ __forceinline__ void tile_matrix(u32& offset, u32& rows, u32& cols) {
  offset = (u32)M::kMaster;
  rows = (u32)M::kRows;
  cols = (u32)M::kCols;
}

// Sources of an operand's vectors: vector idx starts at float offset src(idx) of src.base, or is absent (NONE:
// zeros). 32-bit offsets rather than pointers: a thread has 16 loads in flight, and 64-bit addresses computed ahead
// of them cost twice the registers (measured: the difference between spilling and not in the tightest plans).
// Entry vectors: the pool vector named by word \`word\` of staged entry idx, from element \`offset\` on; absent past
// \`count\`, or where word \`skip\` (if >= 0) is NONE.
struct TileEntryVectors {
  const float* base; // the pool
  const u32* ent;
  int words, word, skip;
  u32 count, offset;
  __device__ __forceinline__ u32 operator()(u32 idx) const {
    if (idx >= count) return kNone;
    const u32* e = ent + words * idx;
    if (skip >= 0 && e[skip] == kNone) return kNone;
    return e[word] + offset;
  }
};
// Rows of the row-major matrix at float offset \`offset\` of base, \`cols\` wide: row row0 + idx from column col0 on;
// absent from row \`end\` on (the matrix's last row, or the end of the rows a tile covers).
struct TileMatrixRows {
  const float* base; // the master copy
  u32 offset, end, cols, row0, col0;
  __device__ __forceinline__ u32 operator()(u32 idx) const {
    const u32 r = row0 + idx;
    return r < end ? offset + r * cols + col0 : kNone;
  }
};

// Loaders of one operand's chunk [k0, k0 + kTileK): fetch() issues thread tid's kTilePer global loads into
// registers (all in flight together), put() stores them into the staged chunk.
//
// Vectors along k (vector i of the source is column i of the chunk): S[k][i] = src(i)[k0 + k], zero for k0 + k >= K.
// Lane l reads k = 8q + l % 8 of vector i = 32h + 4 warp + l / 8: 8 lanes read one 32-byte sector, and a warp's
// stores (8 k x 4 i) land in 32 different banks thanks to tile_at's swizzle.
template <class Src> struct TileAlongK {
  Src src;
  u32 K;
  __device__ __forceinline__ void fetch(float (&v)[kTilePer], u32 k0, u32 tid) const {
    const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int h = 0; h < kTilePer / 4; ++h) {
      // one pointer per vector: its 4 loads are then immediate offsets from it
      const u32 o = src(32 * h + 4 * warp + (lane >> 3));
      const float* p = src.base + (o != kNone ? o : 0u) + k0 + (lane & 7);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const u32 k = k0 + 8 * q + (lane & 7);
        v[4 * h + q] = o != kNone && k < K ? p[8 * q] : 0.f;
      }
    }
  }
  __device__ __forceinline__ void put(const float (&v)[kTilePer], float* s, u32 tid) const {
    const int lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int h = 0; h < kTilePer / 4; ++h)
#pragma unroll
      for (int q = 0; q < 4; ++q) s[tile_at(8 * q + (lane & 7), 32 * h + 4 * warp + (lane >> 3))] = v[4 * h + q];
  }
};
// Vectors along i (vector k of the source is row k of the chunk): S[k][i] = src(k0 + k)[i], zero for i >= n.
// Thread t reads i = t % 64 of k = t / 64 + 4m: a warp reads 128 consecutive bytes and stores into 32 banks.
template <class Src> struct TileAlongI {
  Src src;
  u32 n;
  __device__ __forceinline__ void fetch(float (&v)[kTilePer], u32 k0, u32 tid) const {
    const u32 i = tid % kTileDim, kb = tid / kTileDim;
#pragma unroll
    for (int m = 0; m < kTilePer; ++m) {
      const u32 o = src(k0 + kb + 4 * m);
      v[m] = o != kNone && i < n ? src.base[o + i] : 0.f;
    }
  }
  __device__ __forceinline__ void put(const float (&v)[kTilePer], float* s, u32 tid) const {
    const int i = tid % kTileDim, kb = tid / kTileDim;
#pragma unroll
    for (int m = 0; m < kTilePer; ++m) s[tile_at(kb + 4 * m, i)] = v[m];
  }
};

// A thread's values of one operand for one k: 4 (a float4) or 2 (a float2) consecutive floats of a staged row.
__device__ __forceinline__ void tile_frag(const float* p, float (&v)[4]) {
  const float4 t = *reinterpret_cast<const float4*>(p);
  v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
}
__device__ __forceinline__ void tile_frag(const float* p, float (&v)[2]) {
  const float2 t = *reinterpret_cast<const float2*>(p);
  v[0] = t.x, v[1] = t.y;
}

// The accumulators += this chunk's products A[k][4ty + ii] * B[k][4tx + jj] over its kTileK values of k: from shared
// memory into registers and back, rows ii in kTilePasses passes of kR (fewer registers, more shared reads). A warp's
// A reads are two addresses (a broadcast), its B reads 16 float4s of one row.
// k runs as k = 8 kk + j with j outer: the swizzle of tile_at depends on j only, so each j costs one address per
// operand and the kk steps are immediate offsets (the order of a sum's terms does not matter here). The kk loop is
// unrolled only in fast mode: unrolling lets the compiler load ahead, which takes registers (tileMode).
// A thread whose 4 rows of A are all at or past arows (entries the tile does not have: a short list, as an off-chip
// matrix's at small batches) has only zeros to add and skips the products: with 8 entries one warp of 8 computes.
__device__ __forceinline__ void tile_mma(float* sa, float* sb, u32 tid, u32 arows) {
  constexpr int kR = 4 / kTilePasses;
  static_assert(kTilePasses == 1 || kTilePasses == 2, "kTilePasses: 1 or 2");
  const int tx = tid & 15, ty = tid >> 4;
  if (4u * (u32)ty >= arows) return;
#pragma unroll 1
  for (int pass = 0; pass < kTilePasses; ++pass) {
    const int ii0 = kR * pass; // this pass's rows: ii in [ii0, ii0 + kR)
    float acc[kR][4];
    float* row[kR];
#pragma unroll
    for (int ii = 0; ii < kR; ++ii) {
      row[ii] = tile_acc_row(sa, sb, ii0 + ii, tid);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) acc[ii][jj] = row[ii][jj * kThreads];
    }
#pragma unroll 1
    for (int j = 0; j < 8; ++j) {
      const float* pa = sa + tile_at(j, 4 * ty + ii0);
      const float* pb = sb + tile_at(j, 4 * tx);
#pragma unroll(kTileFast ? kTileK / 8 : 1)
      for (int kk = 0; kk < kTileK / 8; ++kk) {
        float a[kR], b[4];
        tile_frag(pa + 8 * kk * kTileDim, a);
        tile_frag(pb + 8 * kk * kTileDim, b);
#pragma unroll
        for (int ii = 0; ii < kR; ++ii)
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) acc[ii][jj] = fmaf(a[ii], b[jj], acc[ii][jj]);
      }
    }
#pragma unroll
    for (int ii = 0; ii < kR; ++ii)
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) row[ii][jj * kThreads] = acc[ii][jj];
  }
}

// This thread's accumulators = its 4 x 4 block of A B over op.K() (zero: zeros), read back with tile_acc(). Op builds
// the operands' loaders (op.a(), op.b()) from the TileArgs in shared memory, once per chunk, and op.hook() sees each
// staged chunk before its products. Per chunk: both operands' loads in flight together, a barrier, the products, a
// barrier; in fast mode the next chunk's loads are issued before the products, so their latency overlaps them.
// K is CTA-uniform: every thread reaches every __syncthreads.
template <class Op> __device__ __forceinline__ void tile_product(Op& op, float* sa, float* sb) {
  float va[kTilePer], vb[kTilePer];
  {
    const u32 tid = opaque_tid();
#pragma unroll
    for (int q = 0; q < 16; ++q) *tile_acc(sa, sb, q, tid) = 0.f;
    if (kTileFast) {
      op.a().fetch(va, 0u, tid);
      op.b().fetch(vb, 0u, tid);
    }
  }
#pragma unroll 1
  for (u32 k0 = 0; k0 < op.K(); k0 += kTileK) {
    {
      const u32 tid = opaque_tid();
      if (!kTileFast) {
        op.a().fetch(va, k0, tid);
        op.b().fetch(vb, k0, tid);
      }
      op.a().put(va, sa, tid);
      op.b().put(vb, sb, tid);
    }
    __syncthreads();
    if (kTileFast && k0 + kTileK < op.K()) {
      const u32 tid = opaque_tid();
      op.a().fetch(va, k0 + kTileK, tid);
      op.b().fetch(vb, k0 + kTileK, tid);
    }
    op.hook(sa, k0);
    tile_mma(sa, sb, opaque_tid(), op.arows());
    __syncthreads(); // the next chunk overwrites sa and sb
  }
}

// The tile's list entries (words = words per entry x count) into s_ent; the barrier makes them, and the TileArgs
// that thread 0 wrote before, visible to all threads.
__device__ __forceinline__ void tile_stage_entries(const u32* list, u32 words, u32* s_ent, u32 tid) {
#pragma unroll 1
  for (u32 t = tid; t < words; t += kThreads) s_ent[t] = list[t];
  __syncthreads();
}

// tile: for entries e < count (i) and rows r = r0 + j < rows: y_e[r] = (b_e ? b_e[r] : 0) + W[r] . x_e
// (A[e][k] = x_e[k], B[k][j] = W[r0 + j][k]; K = cols). Plain stores: each y row of the tile is written once.
struct TileForward {
  const TileArgs& g;
  const u32* ent;
  const float* pool;
  const float* master;
  __device__ __forceinline__ u32 K() const { return g.cols; }
  __device__ __forceinline__ u32 arows() const { return g.count; } // A's rows: the entries
  __device__ __forceinline__ TileAlongK<TileEntryVectors> a() const { return {{pool, ent, ${fw}, ${F("x")}, -1, g.count, 0u}, g.cols}; }
  __device__ __forceinline__ TileAlongK<TileMatrixRows> b() const { return {{master, g.offset, g.rows, g.cols, g.r0, 0u}, g.cols}; }
  __device__ __forceinline__ void hook(const float*, u32) const {}
};
__device__ __forceinline__ void tile_forward(const TileArgs& g, const u32* ent, float* pool, const float* master, float* sa, float* sb) {
  TileForward op{g, ent, pool, master};
  tile_product(op, sa, sb);
  const u32 tid = opaque_tid();
  const int tx = tid & 15, ty = tid >> 4;
  const u32 count = g.count, r0 = g.r0, rows = g.rows;
#pragma unroll 1
  for (int ii = 0; ii < 4; ++ii) {
    const u32 e = 4 * ty + ii;
    if (e >= count) continue;
    float* y = pool + ent[${fw} * e + ${F("y")}];
    const u32 bo = ent[${fw} * e + ${F("b")}];
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const u32 r = r0 + 4 * tx + jj;
      if (r < rows) y[r] = (bo != kNone ? (pool + bo)[r] : 0.f) + *tile_acc(sa, sb, 4 * ii + jj, tid);
    }
  }
}

// tile.acc: as tile over the columns c = c0 + k < min(c0 + kTileSplitCols, cols) only, added into y atomically (the
// other column slices' tiles add to the same rows; y was zeroed in step 0), the bias by the c0 = 0 tiles:
// y_e[r] += (c0 == 0 && b_e ? b_e[r] : 0) + sum_c W[r][c] x_e[c] (A[e][k] = x_e[c0 + k], B[k][j] = W[r0 + j][c0 + k]).
struct TileForwardAcc {
  const TileArgs& g;
  const u32* ent;
  const float* pool;
  const float* master;
  __device__ __forceinline__ u32 K() const { // the case checked c0 < cols
    return g.cols - g.c0 < kTileSplitCols ? g.cols - g.c0 : kTileSplitCols;
  }
  __device__ __forceinline__ u32 arows() const { return g.count; } // A's rows: the entries
  __device__ __forceinline__ TileAlongK<TileEntryVectors> a() const { return {{pool, ent, ${fw}, ${F("x")}, -1, g.count, g.c0}, K()}; }
  __device__ __forceinline__ TileAlongK<TileMatrixRows> b() const { return {{master, g.offset, g.rows, g.cols, g.r0, g.c0}, K()}; }
  __device__ __forceinline__ void hook(const float*, u32) const {}
};
__device__ __forceinline__ void tile_forward_acc(const TileArgs& g, const u32* ent, float* pool, const float* master, float* sa, float* sb) {
  TileForwardAcc op{g, ent, pool, master};
  tile_product(op, sa, sb);
  const u32 tid = opaque_tid();
  const int tx = tid & 15, ty = tid >> 4;
  const u32 count = g.count, r0 = g.r0, rows = g.rows;
  const bool first = g.c0 == 0u;
#pragma unroll 1
  for (int ii = 0; ii < 4; ++ii) {
    const u32 e = 4 * ty + ii;
    if (e >= count) continue;
    float* y = pool + ent[${fw} * e + ${F("y")}];
    const u32 bo = first ? ent[${fw} * e + ${F("b")}] : kNone;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const u32 r = r0 + 4 * tx + jj;
      const float v = (bo != kNone && r < rows ? (pool + bo)[r] : 0.f) + *tile_acc(sa, sb, 4 * ii + jj, tid);
      if (r < rows && v != 0.f) atomicAdd(y + r, v);
    }
  }
}

// tile.xbar: for entries e < count (i) whose xbar is not NONE and columns c = c0 + j < cols:
// xbar_e[c] += sum_r W[r][c] ybar_e[r] over the rows r = r0 + k < min(r0 + kTileXbarRows, rows) (A[e][k] =
// ybar_e[r0 + k], B[k][j] = W[r0 + k][c0 + j]; K = that many rows). Atomics: the other row ranges' tiles and other
// instructions (another parent's product, an elementwise backward) add to the same xbar; exact zeros are not added.
struct TileXbar {
  const TileArgs& g;
  const u32* ent;
  const float* pool;
  const float* master;
  __device__ __forceinline__ u32 K() const { // the case checked r0 < rows
    return g.rows - g.r0 < kTileXbarRows ? g.rows - g.r0 : kTileXbarRows;
  }
  __device__ __forceinline__ u32 arows() const { return g.count; } // A's rows: the entries
  __device__ __forceinline__ TileAlongK<TileEntryVectors> a() const {
    return {{pool, ent, ${xw}, ${X("ybar")}, ${X("xbar")}, g.count, g.r0}, K()};
  }
  __device__ __forceinline__ TileAlongI<TileMatrixRows> b() const {
    return {{master, g.offset, g.r0 + K(), g.cols, g.r0, g.c0}, g.c0 < g.cols ? g.cols - g.c0 : 0u};
  }
  __device__ __forceinline__ void hook(const float*, u32) const {}
};
__device__ __forceinline__ void tile_xbar(const TileArgs& g, const u32* ent, float* pool, const float* master, float* sa, float* sb) {
  TileXbar op{g, ent, pool, master};
  tile_product(op, sa, sb);
  const u32 tid = opaque_tid();
  const int tx = tid & 15, ty = tid >> 4;
  const u32 count = g.count, c0 = g.c0, cols = g.cols;
#pragma unroll 1
  for (int ii = 0; ii < 4; ++ii) {
    const u32 e = 4 * ty + ii;
    if (e >= count) continue;
    const u32 xo = ent[${xw} * e + ${X("xbar")}];
    if (xo == kNone) continue;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const u32 c = c0 + 4 * tx + jj;
      const float v = *tile_acc(sa, sb, 4 * ii + jj, tid);
      if (c < cols && v != 0.f) atomicAdd(pool + xo + c, v);
    }
  }
}

// tile.wbar: for rows r = r0 + i < rows and columns c = c0 + j < cols: G[r][c] += sum_e ybar_e[r] x_e[c] over the
// count entries (A[k][i] = ybar_k[r0 + i], B[k][j] = x_k[c0 + j]; K = count), atomically into the gradient buffer
// (other tiles add to the same block); exact zeros are not added.
// The tile with c0 = 0 also adds the bias gradient bbar_e[r] += ybar_e[r]. Usually all entries share one bbar (the
// matrix's bias): then thread i < 64 sums its row of the staged ybar chunks (hook) and adds the sum once. Entries
// with different bbar (mixed) take a second pass after the product, over ybar in global memory, with one atomicAdd
// per run of consecutive entries with the same bbar, row and quarter of the entries. (Flushing runs inside the
// chunk loop made the tightest plans spill: measured.)
struct TileWbar {
  const TileArgs& g;
  const u32* ent;
  float* pool;
  float sum; // this thread's row of ybar, summed over the chunks seen so far (when g.bias is not NONE)
  __device__ __forceinline__ u32 K() const { return g.count; }
  __device__ __forceinline__ u32 arows() const { return kTileDim; } // A's rows: the tile's rows of the gradient
  __device__ __forceinline__ TileAlongI<TileEntryVectors> a() const {
    return {{pool, ent, ${gw}, ${G("ybar")}, -1, g.count, g.r0}, g.r0 < g.rows ? g.rows - g.r0 : 0u};
  }
  __device__ __forceinline__ TileAlongI<TileEntryVectors> b() const {
    return {{pool, ent, ${gw}, ${G("x")}, -1, g.count, g.c0}, g.c0 < g.cols ? g.cols - g.c0 : 0u};
  }
  __device__ __forceinline__ u32 word(u32 e, int w) const {
    return ent[${gw} * e + w];
  }
  // This thread's row i of the tile takes part in the bias gradient: the tile starts at column 0, the row exists.
  __device__ __forceinline__ bool bias_row(u32 i) const {
    return g.c0 == 0u && i < kTileDim && g.r0 + i < g.rows;
  }
  // The staged chunk's ybar of this thread's row; rows of entries past count are zeros.
  __device__ __forceinline__ void hook(const float* sa, u32) {
    const u32 i = opaque_tid();
    if (g.bias == kNone || !bias_row(i)) return;
#pragma unroll 8
    for (int k = 0; k < kTileK; ++k) sum += sa[tile_at(k, i)];
  }
  // Mixed bbar: thread t takes row i = t % 64 of the entries [64q, 64q + 64), q = t / 64, and adds each run's sum.
  __device__ __forceinline__ void mixed_runs(u32 tid) const {
    const u32 i = tid % kTileDim, q = tid / kTileDim, r = g.r0 + i;
    if (g.c0 != 0u || r >= g.rows) return;
    const u32 begin = q * kTileDim, end = g.count < begin + kTileDim ? g.count : begin + kTileDim;
    u32 run = kNone;
    float s = 0.f;
    constexpr int kBlock = 8; // loads in flight
#pragma unroll 1
    for (u32 e0 = begin; e0 < end; e0 += kBlock) {
      float v[kBlock];
      u32 b[kBlock];
#pragma unroll
      for (int k = 0; k < kBlock; ++k) {
        const bool in = e0 + k < end;
        b[k] = in ? word(e0 + k, ${G("bbar")}) : run;
        v[k] = in ? pool[word(e0 + k, ${G("ybar")}) + r] : 0.f;
      }
#pragma unroll
      for (int k = 0; k < kBlock; ++k) {
        if (b[k] != run) {
          if (run != kNone && s != 0.f) atomicAdd(pool + run + r, s);
          run = b[k];
          s = 0.f;
        }
        s += v[k];
      }
    }
    if (run != kNone && s != 0.f) atomicAdd(pool + run + r, s);
  }
};
static_assert(kTileWbarEntries <= kThreads, "tile_wbar checks one entry's bbar per thread");
static_assert(kTileWbarEntries <= 4 * kTileDim, "mixed_runs: 4 quarters of 64 entries");
__device__ __forceinline__ void tile_wbar(TileArgs& g, const u32* ent, float* pool, float* grads, float* sa, float* sb) {
  TileWbar op{g, ent, pool, 0.f};
  if (g.c0 == 0u) { // CTA-uniform: every thread reaches the barrier
    // Do all entries share entry 0's bbar? One entry per thread; published to the routines by tile_product's first
    // barrier (only read when count > 0, i.e. when there is one).
    const u32 tid = opaque_tid(), count = g.count;
    const bool same = tid >= count || op.word(tid, ${G("bbar")}) == op.word(0, ${G("bbar")});
    const bool all = __syncthreads_and(same);
    if (tid == 0) {
      g.bias = all && count > 0u ? op.word(0, ${G("bbar")}) : kNone;
      g.mixed = all ? 0u : 1u;
    }
  }
  tile_product(op, sa, sb);
  const u32 tid = opaque_tid();
  if (g.count > 0u && g.c0 == 0u) {
    if (g.bias != kNone && op.bias_row(tid) && op.sum != 0.f) atomicAdd(pool + g.bias + (g.r0 + tid), op.sum);
    if (g.mixed) op.mixed_runs(tid);
  }
  const int tx = tid & 15, ty = tid >> 4;
  const u32 r0 = g.r0, c0 = g.c0, rows = g.rows, cols = g.cols, offset = g.offset;
#pragma unroll 1
  for (int ii = 0; ii < 4; ++ii) {
    const u32 r = r0 + 4 * ty + ii;
    if (r >= rows) continue;
    float* gr = grads + (offset + r * cols);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const u32 c = c0 + 4 * tx + jj;
      const float v = *tile_acc(sa, sb, 4 * ii + jj, tid);
      if (c < cols && v != 0.f) atomicAdd(gr + c, v);
    }
  }
}
`;
}

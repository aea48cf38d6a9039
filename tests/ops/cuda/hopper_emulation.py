"""CPU emulation of attention_hopper.cu (the wgmma + TMA forward) and attention_hopper_backward.cu
(its dK/dV and dQ kernels), run by kernel_emulation.py.

What is emulated, after the PTX ISA's descriptions, and checked against exact attention in f64:
 - shared memory as bytes: the TMA box copies (cp.async.bulk.tensor, 4-d tensor maps over
   (d, heads, rows, batch), zeros past the visible rows and past head_dim) written through the
   128-byte swizzle (16-byte chunk c of a 128-byte row r lands at chunk c ^ (r % 8));
 - the wgmma matrix descriptors exactly as sw128_desc packs them (the 64 bits decoded back into
   start address, leading and stride byte offsets and swizzle mode), and the operand addressing of
   the 128-byte swizzle mode: K-major Q and K tiles (16 k values at +32 bytes per k-step) and the
   MN-major V tile read transposed (16 keys at +16 rows per k-step);
 - the m64nNk16 accumulator fragment (thread 32 w + lane of a warpgroup holds rows 16 w + g and
   16 w + g + 8, columns 8 j + 2 t + {0, 1}) and the A fragment from registers (P);
 - the mbarrier ring of 2 stages: phases and parities as the kernel waits on them, the producer
   running ahead as far as the barriers let it, so a wrong parity shows as a wait that would block
   forever or pass early (a tile read before it landed or overwritten before it was read).
Shared memory starts as NaN, so a read of bytes no copy wrote shows in the result.
The backward's gradients are checked against exact f64 gradients (kernel_emulation.ref_backward),
and check_hopper_backward shows that the comparison fails when one index is broken.
"""
import math

import numpy as np

import kernel_emulation as ke

M, N, WG_ROWS, STAGES, ROW_BYTES = 128, 64, 64, 2, 128


def swizzle(addr):  # CU_TENSOR_MAP_SWIZZLE_128B and wgmma's 128-byte mode: address bits 4-6 ^= bits 7-9
    return addr ^ (((addr >> 7) & 7) << 4)


class Layout:  # attention_hopper.cu's Layout<HD>, byte offsets
    def __init__(self, hd):
        self.q_block, self.kv_block = M * ROW_BYTES, N * ROW_BYTES
        self.tile = N * hd * 2; self.kv = M * hd * 2
        self.bytes = self.kv + STAGES * 2 * self.tile
        assert all(x % 1024 == 0 for x in (self.q_block, self.kv_block, self.tile, self.kv))  # Note [swizzled tiles]

    def k(self, s): return self.kv + s * 2 * self.tile
    def v(self, s): return self.k(s) + self.tile


def tma_load(smem, dst, src, c0, head, row0, rows, box_rows):
    """One box: src [rows_alloc, heads, d] of one batch, rows < `rows` visible; 64 columns from c0."""
    d = src.shape[2]
    for r in range(box_rows):
        for c in range(64):
            inside = row0 + r < rows and c0 + c < d
            smem[swizzle(dst + r * ROW_BYTES + c * 2) // 2] = src[row0 + r, head, c0 + c] if inside else 0.0


def sw128_desc(addr):  # attention_hopper.cu's sw128_desc, bit for bit
    return ((addr & 0x3FFFF) >> 4) | (1024 >> 4) << 16 | (1024 >> 4) << 32 | 1 << 62


def decode(desc):  # the PTX ISA's matrix-descriptor fields
    start = (desc & 0x3FFF) << 4; lbo = ((desc >> 16) & 0x3FFF) << 4; sbo = ((desc >> 32) & 0x3FFF) << 4
    assert (desc >> 49) & 7 == 0 and desc >> 62 == 1, "base offset 0 and 128-byte swizzle"
    return start, lbo, sbo


def operand(smem, desc, rows, k_major):
    """A [rows x 16] (k_major: element (r, k) at row r, byte 2 k) or, MN-major, B^T: element (k, n)
    at row k, byte 2 n (n < 64), returned as [rows or 64, 16]."""
    start, _, sbo = decode(desc)
    if k_major:
        addr = lambda r, k: start + (r // 8) * sbo + (r % 8) * ROW_BYTES + 2 * k
        return np.array([[smem[swizzle(addr(r, k)) // 2] for k in range(16)] for r in range(rows)])
    addr = lambda k, n: start + (k // 8) * sbo + (k % 8) * ROW_BYTES + 2 * n
    return np.array([[smem[swizzle(addr(k, n)) // 2] for k in range(16)] for n in range(64)])


lane = np.arange(32); g = lane // 4; t = lane % 4


def to_fragment(D):  # [64, 64] -> the warpgroup's accumulators [4 warps][8][32][4]
    f = np.zeros((4, 8, 32, 4))
    for w in range(4):
        for j in range(8):
            for e in range(4):
                f[w, j, :, e] = D[16 * w + g + 8 * (e // 2), 8 * j + 2 * t + e % 2]
    return f


def from_a_registers(a):  # per warp a [4 regs, 32, 2] (the m16n8k16 A layout) -> A [64, 16]
    A = np.full((64, 16), np.nan)
    for w in range(4):
        for i in range(4):
            r = 16 * w + g + 8 * (i % 2); c = 2 * t + 8 * (i // 2)
            A[r, c] = a[w][i][:, 0]; A[r, c + 1] = a[w][i][:, 1]
    return A


class Barrier:  # an mbarrier: arrivals per phase, completed phases; try_wait.parity semantics
    def __init__(self, count): self.count, self.arrived, self.phases = count, 0, 0
    def arrive(self, n=1):
        self.arrived += n
        if self.arrived == self.count: self.arrived, self.phases = 0, self.phases + 1
    def ready(self, parity): return (self.phases & 1) != parity  # the phase of that parity is complete


def forward(q, k, v, kv_len, scale, window=0):
    """q [B, tq, hq, d], k, v [B, tk, hkv, d] -> out, lse as attention_hopper.cu computes them."""
    B, tq, hq, d = q.shape; _, tk, hkv, _ = k.shape
    HD = 64 if d <= 64 else 128; L = Layout(HD); W = ke.kernel_window(window); q_pos0 = kv_len - tq
    out = np.full(q.shape, np.nan); lse = np.full((B, hq, tq), np.nan)
    m_tiles = (tq + M - 1) // M
    for b in range(B):
        for h in range(hq):
            for bx in range(m_tiles):
                block(q[b], k[b], v[b], out[b], lse[b], L, HD, (m_tiles - 1 - bx) * M, h, h // (hq // hkv),
                      kv_len, q_pos0, W, scale)
    return out, lse


def block(q, k, v, out, lse, L, HD, m0, h, kh, kv_len, q_pos0, W, scale):
    tq = q.shape[0]
    smem = np.full(L.bytes // 2, np.nan)
    keys = min(q_pos0 + min(m0 + M, tq), kv_len); n_tiles = (keys + N - 1) // N
    nt0 = max(0, q_pos0 + m0 - W) // N
    full = [Barrier(1) for _ in range(STAGES)]; empty = [Barrier(256) for _ in range(STAGES)]
    for cb in range(HD // 64):  # the Q box, then q_full completes
        tma_load(smem, cb * L.q_block, q, cb * 64, h, m0, tq, M)
    consumers = [Consumer(wg, m0, q_pos0, kv_len, tq, W, HD) for wg in range(2)]
    loaded = {}  # stage -> the tile index it holds
    produced = 0
    for i in range(n_tiles - nt0):
        # The producer runs ahead while its empty-wait passes (parity ((i / 2) & 1) ^ 1).
        while produced < n_tiles - nt0 and empty[produced % STAGES].ready(((produced // STAGES) & 1) ^ 1):
            s = produced % STAGES; n0 = (nt0 + produced) * N
            for cb in range(HD // 64):
                tma_load(smem, L.k(s) + cb * L.kv_block, k, cb * 64, kh, n0, kv_len, N)
                tma_load(smem, L.v(s) + cb * L.kv_block, v, cb * 64, kh, n0, kv_len, N)
            loaded[s] = produced; full[s].arrive(); produced += 1
        s = i % STAGES
        assert full[s].ready((i // STAGES) & 1) and loaded.get(s) == i, "consumer would wait forever or read another tile"
        for c in consumers: c.tile(smem, L, s, (nt0 + i) * N, scale)
        empty[s].arrive(256)
    assert produced == n_tiles - nt0
    for c in consumers: c.store(out, lse, h)


class Consumer:  # one consumer warpgroup (attention_hopper.cu's consume)
    def __init__(self, wg, m0, q_pos0, kv_len, tq, W, HD):
        self.wg, self.q_pos0, self.kv_len, self.tq, self.W, self.HD = wg, q_pos0, kv_len, tq, W, HD
        self.w0 = w0 = m0 + wg * WG_ROWS
        self.wg_last = min(q_pos0 + min(w0 + WG_ROWS, tq) - 1, kv_len - 1) if w0 < tq else -1
        self.wg_all = q_pos0 + w0; self.wg_first = self.wg_all - W; self.all_first = self.wg_all + WG_ROWS - 1 - W
        self.o = np.zeros((4, HD // 8, 32, 4))
        self.row_max = [[np.full(32, -np.inf)] * 2 for _ in range(4)]; self.row_sum = [[np.zeros(32)] * 2 for _ in range(4)]

    def tile(self, smem, L, s, n0, scale):
        active = n0 <= self.wg_last and n0 + N - 1 >= self.wg_first
        whole = n0 + N - 1 <= self.wg_all and n0 >= self.all_first
        ke.SKIPPED["hopper " + ("whole" if active and whole else "masked" if active else "skipped")] += 1
        if not active: return
        q_base = self.wg * WG_ROWS * ROW_BYTES
        S = np.zeros((64, 64))
        for kk in range(self.HD // 16):  # scores(): wgmma_ss per k-step
            at = (kk % 4) * 32
            A = operand(smem, sw128_desc(q_base + (kk // 4) * L.q_block + at), 64, True)
            Bt = operand(smem, sw128_desc(L.k(s) + (kk // 4) * L.kv_block + at), 64, True)
            S += A @ Bt.T
        sc = to_fragment(S)
        for w in range(4):
            pos = self.q_pos0 + self.w0 + 16 * w + g
            first = [ke.tile_col(pos + 8 * rr - self.W, n0, N) for rr in range(2)]
            last = None if whole else [ke.tile_col(np.minimum(pos + 8 * rr, self.kv_len - 1), n0, N) for rr in range(2)]
            ke.online_softmax(sc[w], self.o[w], self.row_max[w], self.row_sum[w], first, last, scale)
        for kk in range(4):  # accumulate_pv(): wgmma_rs per k-step and 64-column block
            A = from_a_registers([ke.c_to_a(sc[w, 2 * kk], sc[w, 2 * kk + 1]) for w in range(4)])
            for cb in range(self.HD // 64):
                Bt = operand(smem, sw128_desc(L.v(s) + cb * L.kv_block + kk * 16 * ROW_BYTES), 64, False)
                self.o[:, cb * 8:cb * 8 + 8] += to_fragment(A @ Bt.T)

    def store(self, out, lse, h):
        d = out.shape[2]
        for w in range(4):
            for rr in range(2):
                ssum = ke.quad_sum(self.row_sum[w][rr]); row = self.w0 + 16 * w + g + 8 * rr
                for L_ in range(32):
                    if row[L_] >= self.tq: continue
                    for dt in range(d // 8):  # store_rows: the d stored columns
                        for e in range(2):
                            out[row[L_], h, dt * 8 + 2 * t[L_] + e] = self.o[w, dt, L_, 2 * rr + e] / ssum[L_]
                    if t[L_] == 0:
                        lse[h, row[L_]] = (self.row_max[w][rr][L_] + math.log2(ssum[L_])) * math.log(2)


def check_hopper_forward():
    for key in ("hopper whole", "hopper masked", "hopper skipped"): ke.SKIPPED[key] = 0
    rng = np.random.default_rng(1)
    # (B, tq, tk, kv_len, hq, hkv, d, window): causal at both widths (96 at 128 with zero columns),
    # grouped heads, two query blocks, decoding with a longer cache, and windows that skip tiles
    # and leave rows without a key in a tile.
    cases = [(2, 130, 130, 130, 2, 1, 64, 0), (1, 70, 100, 90, 2, 1, 128, 0), (1, 65, 65, 65, 1, 1, 96, 0),
             (1, 3, 140, 133, 2, 2, 64, 0), (1, 200, 200, 200, 1, 1, 64, 37), (1, 150, 150, 150, 1, 1, 64, 1)]
    for (B, tq, tk, kv_len, hq, hkv, d, w) in cases:
        q, k, v = (rng.standard_normal(s) for s in [(B, tq, hq, d), (B, tk, hkv, d), (B, tk, hkv, d)])
        k[:, kv_len:] = np.nan; v[:, kv_len:] = np.nan  # past kv_len: never read
        scale = 1 / math.sqrt(d)
        out, lse = forward(q, k, v, kv_len, scale, w)
        for b in range(B):
            ro, rl, _ = ke.reference(q[b], k[b], v[b], kv_len, scale, w)
            assert ke.rel(out[b], ro) < 1e-12 and ke.rel(lse[b], rl) < 1e-12, ("hopper forward", B, tq, kv_len, d, w)
    assert all(ke.SKIPPED[key] > 0 for key in ("hopper whole", "hopper masked", "hopper skipped")), ke.SKIPPED


# ---- the backward: attention_hopper_backward.cu ---------------------------------------------------
# The same shared memory, descriptors and fragments as the forward; two warpgroups that both compute,
# a fixed pair of 128-row tiles and a ring of 2 stages of 64-row pairs that warp 0 refills.
FIXED, TILE, THREADS = 128, 64, 256
MUTATE = set()  # names of deliberate errors, for the check that the comparison can fail


class BwdLayout:  # attention_hopper_backward.cu's Layout<HD>, byte offsets
    def __init__(self, hd):
        self.fixed_block, self.tile_block = FIXED * ROW_BYTES, TILE * ROW_BYTES
        self.fixed, self.tile = FIXED * hd * 2, TILE * hd * 2
        self.A, self.B = 0, self.fixed
        self.bytes = 2 * self.fixed + STAGES * 2 * self.tile
        assert all(x % 1024 == 0 for x in (self.fixed_block, self.tile_block, self.fixed, self.tile))

    def a(self, s): return 2 * self.fixed + s * 2 * self.tile
    def b(self, s): return self.a(s) + self.tile


def load_pair(smem, a, b, src_a, src_b, rows, head, row0, limit, hd):  # load_pair<HD>: box rows `rows`
    for cb in range(hd // 64):
        tma_load(smem, a + cb * rows * ROW_BYTES, src_a, cb * 64, head, row0, limit, rows)
        tma_load(smem, b + cb * rows * ROW_BYTES, src_b, cb * 64, head, row0, limit, rows)


def ring(count, load, tile):
    """The kernels' pipeline: tiles 0 and 1 loaded up front; after tile i every thread arrives on
    empty[i % 2] and warp 0 waits on it (parity (i / 2) & 1) before loading tile i + 2 there."""
    full = [Barrier(1) for _ in range(STAGES)]; empty = [Barrier(THREADS) for _ in range(STAGES)]; held = {}

    def issue(i):
        s = i % STAGES; load(i, s); held[s] = i; full[s].arrive()
    for i in range(min(count, STAGES)): issue(i)
    for i in range(count):
        s = i % STAGES
        assert full[s].ready((i // STAGES) & 1) and held.get(s) == i, "a wait would block forever or read another tile"
        tile(i, s)
        empty[s].arrive(THREADS)
        if i + STAGES < count:
            assert empty[s].ready((i // STAGES) & 1), "warp 0 would wait forever"
            issue(i + STAGES)


def kmajor(smem, a, a_block, b, b_block, hd):  # issue_kmajor: A [64 x hd] B^T, both K-major
    acc = np.zeros((64, 64))
    for kk in range(hd // 16):
        at = (kk % 4) * 32
        A = operand(smem, sw128_desc(a + (kk // 4) * a_block + at), 64, True)
        Bt = operand(smem, sw128_desc(b + (kk // 4) * b_block + at), 64, True)
        acc += A @ Bt.T
    return to_fragment(acc)


def rows_product(acc, c, smem, b, b_block, hd):  # issue_rows: acc [4, hd / 8, 32, 4] += C B, C from registers
    for kk in range(4):
        A = from_a_registers([ke.c_to_a(c[w, 2 * kk], c[w, 2 * kk + 1]) for w in range(4)])
        for cb in range(hd // 64):
            Bt = operand(smem, sw128_desc(b + cb * b_block + kk * 16 * ROW_BYTES), 64, False)
            acc[:, cb * 8:cb * 8 + 8] += to_fragment(A @ Bt.T)


def store(dst, acc, r0, head, limit, mul):  # store_rows for the warpgroup's rows r0 + 16 w + g + 8 rr
    d = dst.shape[2]
    for w in range(4):
        for rr in range(2):
            row = r0 + 16 * w + g + 8 * rr
            for L_ in range(32):
                if row[L_] >= limit: continue
                for dt in range(d // 8):
                    for e in range(2):
                        dst[row[L_], head, dt * 8 + 2 * t[L_] + e] = acc[w, dt, L_, 2 * rr + e] * mul


def hopper_dkdv(q, k, v, dout, lse, delta, scale, window):
    """hopper_dkdv_kernel for one batch: q, dout [T, hq, d], k, v [T, hkv, d], lse, delta [hq, T]."""
    T_, hq, d = q.shape; hkv = k.shape[1]; group = hq // hkv
    HD = 64 if d <= 64 else 128; L = BwdLayout(HD); W = ke.kernel_window(window); scale_log2 = scale * ke.LOG2E
    dk = np.full(k.shape, np.nan); dv = np.full(v.shape, np.nan)
    for kh in range(hkv):
        for bx in range((T_ + FIXED - 1) // FIXED):
            n0 = bx * FIXED; smem = np.full(L.bytes // 2, np.nan)
            m_first = n0 // TILE; per_head = min(T_ - 1, n0 + FIXED - 1 + W) // TILE + 1 - m_first
            load_pair(smem, L.A, L.B, k, v, FIXED, kh, n0, T_, HD)
            acc = [(np.zeros((4, HD // 8, 32, 4)), np.zeros((4, HD // 8, 32, 4))) for _ in range(2)]  # (dk, dv) per wg

            def load(i, s):
                load_pair(smem, L.a(s), L.b(s), q, dout, TILE, kh * group + i // per_head,
                          (m_first + i % per_head) * TILE, T_, HD)

            def tile(i, s):
                h = kh * group + i // per_head; m0 = (m_first + i % per_head) * TILE
                for wg in range(2):
                    k0 = n0 + wg * WG_ROWS
                    active = k0 <= min(m0 + TILE - 1, T_ - 1) and m0 <= k0 + WG_ROWS - 1 + W
                    ke.SKIPPED["hopper dkdv " + ("active" if active else "skipped")] += 1
                    if active: dkdv_tile(acc[wg], smem, L, s, k0, m0, h, lse, delta, T_, W, scale_log2, HD)
            ring(group * per_head, load, tile)
            for wg in range(2):
                store(dk, acc[wg][0], n0 + wg * WG_ROWS, kh, T_, scale)
                store(dv, acc[wg][1], n0 + wg * WG_ROWS, kh, T_, 1.0)
    return dk, dv


def dkdv_tile(acc, smem, L, s, k0, m0, h, lse, delta, T_, W, scale_log2, HD):
    rows = (k0 % FIXED + (1 if "wg rows" in MUTATE else 0)) * ROW_BYTES  # the warpgroup's keys in K, V: wg 64 rows
    st = kmajor(smem, L.A + rows, L.fixed_block, L.a(s), L.tile_block, HD)   # S^T = K Q^T
    dpt = kmajor(smem, L.B + rows, L.fixed_block, L.b(s), L.tile_block, HD)  # dP^T = V dO^T
    with np.errstate(over="ignore", invalid="ignore"):
        for w in range(4):
            for rr in range(2):
                key = k0 + 16 * w + g + 8 * rr
                first = ke.tile_col(key, m0, TILE); last = ke.tile_col(np.minimum(T_ - 1, key + W), m0, TILE)
                for j in range(8):
                    for e in range(2):
                        col = 8 * j + 2 * t + e + (1 if "query column" in MUTATE else 0); qpos = m0 + col
                        inside = qpos < T_; at = np.minimum(qpos, T_ - 1)
                        lse_l2 = np.where(inside, lse[h, at] * ke.LOG2E, 0.0); dl = np.where(inside, delta[h, at], 0.0)
                        valid = (col >= first) & (col <= last)
                        pv = np.where(valid, np.exp2(st[w, j, :, 2 * rr + e] * scale_log2 - lse_l2), 0.0)
                        st[w, j, :, 2 * rr + e] = pv
                        dpt[w, j, :, 2 * rr + e] = pv * (dpt[w, j, :, 2 * rr + e] - dl)
    rows_product(acc[1], st, smem, L.b(s), L.tile_block, HD)   # dV += P^T dO
    rows_product(acc[0], dpt, smem, L.a(s), L.tile_block, HD)  # dK += dS^T Q


def hopper_dq(q, k, v, dout, lse, delta, scale, window):
    """hopper_dq_kernel for one batch, shapes as hopper_dkdv's."""
    T_, hq, d = q.shape; hkv = k.shape[1]; group = hq // hkv
    HD = 64 if d <= 64 else 128; L = BwdLayout(HD); W = ke.kernel_window(window); scale_log2 = scale * ke.LOG2E
    dq = np.full(q.shape, np.nan); m_tiles = (T_ + FIXED - 1) // FIXED
    for h in range(hq):
        kh = h // group
        for bx in range(m_tiles):
            m0 = (m_tiles - 1 - bx) * FIXED; smem = np.full(L.bytes // 2, np.nan)
            n_tiles = (min(m0 + FIXED, T_) + TILE - 1) // TILE; nt0 = max(0, m0 - W) // TILE
            load_pair(smem, L.A, L.B, q, dout, FIXED, h, m0, T_, HD)
            acc = [np.zeros((4, HD // 8, 32, 4)) for _ in range(2)]

            def load(i, s): load_pair(smem, L.a(s), L.b(s), k, v, TILE, kh, (nt0 + i) * TILE, T_, HD)

            def tile(i, s):
                n0 = (nt0 + i) * TILE
                for wg in range(2):
                    w0 = m0 + wg * WG_ROWS
                    wg_last = min(w0 + WG_ROWS, T_) - 1 if w0 < T_ else -1
                    active = n0 <= wg_last and n0 + TILE - 1 >= w0 - W
                    ke.SKIPPED["hopper dq " + ("active" if active else "skipped")] += 1
                    if active: dq_tile(acc[wg], smem, L, s, n0, w0, wg, h, lse, delta, T_, W, scale_log2, HD)
            ring(n_tiles - nt0, load, tile)
            for wg in range(2): store(dq, acc[wg], m0 + wg * WG_ROWS, h, T_, scale)
    return dq


def dq_tile(acc, smem, L, s, n0, w0, wg, h, lse, delta, T_, W, scale_log2, HD):
    rows = wg * WG_ROWS * ROW_BYTES
    sc = kmajor(smem, L.A + rows, L.fixed_block, L.a(s), L.tile_block, HD)  # S = Q K^T
    dp = kmajor(smem, L.B + rows, L.fixed_block, L.b(s), L.tile_block, HD)  # dP = dO V^T
    with np.errstate(over="ignore", invalid="ignore"):
        for w in range(4):
            for rr in range(2):
                row = w0 + 16 * w + g + 8 * rr; inside = row < T_; at = np.minimum(row, T_ - 1)
                lse_l2 = np.where(inside, lse[h, at] * ke.LOG2E, 0.0); dl = np.where(inside, delta[h, at], 0.0)
                first = ke.tile_col(row - W, n0, TILE); last = np.where(inside, ke.tile_col(row, n0, TILE), -1)
                for j in range(8):
                    for e in range(2):
                        col = 8 * j + 2 * t + e; valid = (col >= first) & (col <= last)
                        pv = np.where(valid, np.exp2(sc[w, j, :, 2 * rr + e] * scale_log2 - lse_l2), 0.0)
                        sc[w, j, :, 2 * rr + e] = pv * (dp[w, j, :, 2 * rr + e] - dl)
    rows_product(acc, sc, smem, L.a(s), L.tile_block, HD)  # dQ += dS K


def backward_errors(T_, hq, hkv, d, w, rng):  # the largest relative error of dq, dk, dv against f64
    q, k, v, dout = (rng.standard_normal(s) for s in [(T_, hq, d), (T_, hkv, d), (T_, hkv, d), (T_, hq, d)])
    scale = 1 / math.sqrt(d)
    _, lse, delta, rdq, rdk, rdv = ke.ref_backward(q, k, v, dout, scale, w)
    dk, dv = hopper_dkdv(q, k, v, dout, lse, delta, scale, w)
    dq = hopper_dq(q, k, v, dout, lse, delta, scale, w)
    return max(ke.rel(dq, rdq), ke.rel(dk, rdk), ke.rel(dv, rdv))


def check_hopper_backward():
    for key in ("hopper dkdv active", "hopper dkdv skipped", "hopper dq active", "hopper dq skipped"):
        ke.SKIPPED[key] = 0
    rng = np.random.default_rng(2)
    # (T, hq, hkv, d, window): causal at both widths (96 at 128 with zero columns), grouped heads
    # over two key blocks, windows that skip warpgroups and leave query tiles out of a key block, and
    # a group of 4 query heads per kv head under a window (the (head, tile) order of the dK/dV ring).
    # The emulation is exact f64 (P and dS are not rounded to 16 bits), so 1e-12 is f64 rounding.
    cases = [(130, 2, 1, 64, 0), (70, 2, 1, 128, 0), (65, 1, 1, 96, 0), (200, 1, 1, 64, 37), (150, 2, 2, 64, 1),
             (260, 1, 1, 64, 70), (140, 4, 1, 64, 50)]
    for case in cases:
        assert backward_errors(*case, rng) < 1e-12, ("hopper backward", case)
    assert all(ke.SKIPPED[key] > 0 for key in ke.SKIPPED if key.startswith("hopper d")), ke.SKIPPED
    # The comparison catches an index off by one: the second warpgroup's keys read a row off, a
    # query's lse and delta taken from its neighbour.
    for mutation in ("wg rows", "query column"):
        MUTATE.add(mutation)
        try:
            assert backward_errors(70, 2, 1, 64, 0, rng) > 1e-3, ("a broken index went unnoticed", mutation)
        finally:
            MUTATE.discard(mutation)

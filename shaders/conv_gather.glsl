/*
 * conv_gather.glsl - the index arithmetic of the implicit-GEMM convolution, shared by its
 * two tilings: conv_implicit.glsl (conv_implicit, conv_lowp_implicit: a TM x TN register
 * block per thread) and conv_frag.glsl (conv_lowp_frag, conv_lowp_coopmat: warps of
 * fragments, the cooperative-matrix tiling). conv_implicit.glsl's comment states the
 * passes, the GEMMs and the load assignment done here: where each operand element of a
 * slab comes from (the im2col gather from NCHW, padding, strides, dilation, groups, the
 * transposed convolution of the data pass, the relu mask, the bias gradient's column of
 * ones), and where each output column goes.
 *
 * The includer defines, before including: the push constants `p` (push_conv_gemm), the
 * window (KH, KW, KK, SH, SW, DH, DW) and PASS, the tile's BK and BN, THREADS (a multiple
 * of BK, and of BN where B_BY_N), LA and LB (loads per thread and slab), B_BY_N, NONE,
 * G_AT(i) and A_AT(i) (an operand element as fp32), the buffer E, and float ra[LA],
 * rb[LB] (the slab fetch() loads).
 */

/* Per thread, fixed for the tile: its B column's position (FORWARD: sample s and the
 * window's corner; DATA: s and the input position plus padding), tensor-relative. */
uint bcol_base; /* FORWARD: x index of (s, gi cg, 0, 0); DATA: dy index of (s, gi og, 0) */
int bcol_y, bcol_x;
bool bcol_ok;
/* WEIGHT: the thread's k of the current slab, located */
uint wk_s, wk_q, wk_oy, wk_ox;
bool wk_ok;

/* v, read from dy at tensor index i, masked by relu_y there (CONV_MASK). */
float dy_at(float v, uint i)
{
    if ((p.flags & CONV_MASK) != 0u)
        return E[p.e_off + i] > 0.0 ? v : 0.0;
    return v;
}

/* Input x at tensor index of plane base `plane` (x index of (s, channel, 0, 0)), (iy, ix);
 * 0 in the padding. */
float x_at(uint plane, int iy, int ix, bool ok)
{
    /* negative coordinates wrap to large unsigned values */
    ok = ok && uint(iy) < p.h && uint(ix) < p.w;
    return ok ? G_AT(p.b_off + plane + uint(iy) * p.w + uint(ix)) : 0.0;
}

/* Locates the thread's B column for the tile (FORWARD, DATA). */
void locate_column(uint col, uint gi)
{
    uint cg = p.cg, og = p.og;
    bcol_ok = col < p.ncols;
    uint cc = bcol_ok ? col : 0u;
    if (PASS == CONV_PASS_FORWARD) {
        uint P = p.oh * p.ow, s = cc / P, q = cc - s * P, oy = q / p.ow, ox = q - oy * p.ow;
        bcol_base = (s * p.c + gi * cg) * p.h * p.w;
        bcol_y = int(oy * SH) - int(p.ph);
        bcol_x = int(ox * SW) - int(p.pw);
    } else {
        uint HW = p.h * p.w, s = cc / HW, i = cc - s * HW, iy = i / p.w, ix = i - iy * p.w;
        bcol_base = (s * p.oc + gi * og) * p.oh * p.ow;
        bcol_y = int(iy + p.ph);
        bcol_x = int(ix + p.pw);
    }
}

/* WEIGHT: locates k = r (a position (s, oy, ox) of the chunk's outputs) of this slab. */
void locate_k(uint r, uint kend)
{
    uint P = p.oh * p.ow;
    wk_ok = r < kend;
    uint rr = wk_ok ? r : 0u;
    wk_s = rr / P;
    wk_q = rr - wk_s * P;
    wk_oy = wk_q / p.ow;
    wk_ox = wk_q - wk_oy * p.ow;
}

/* Element (m, k) of A for group gi: 0 outside [M, kend). */
float load_a(uint m, uint k, uint kend, uint gi)
{
    uint cg = p.cg, og = p.og;
    if (PASS == CONV_PASS_FORWARD) { /* w [og, cg KK] of the group */
        return m < p.m && k < kend ? A_AT(p.a_off + (gi * og + m) * p.k + k) : 0.0;
    } else if (PASS == CONV_PASS_DATA) { /* w[gi og + o, ci = m, t], k = o KK + t */
        uint o = k / KK, t = k - o * KK;
        return m < p.m && k < kend ? A_AT(p.a_off + ((gi * og + o) * cg + m) * KK + t) : 0.0;
    } else { /* dy[s, gi og + o = m, q], k located by locate_k */
        if (!(m < p.m && wk_ok))
            return 0.0;
        uint i = (wk_s * p.oc + gi * og + m) * p.oh * p.ow + wk_q;
        return dy_at(A_AT(p.a_off + i), i);
    }
}

/* Element (k, n) of B for group gi; FORWARD and DATA: n is the thread's located column. */
float load_b(uint k, uint n, uint kend, uint gi)
{
    uint cg = p.cg;
    if (PASS == CONV_PASS_FORWARD) { /* k = ci KK + ky KW + kx */
        uint ci = k / KK, t = k - ci * KK, ky = t / KW, kx = t - ky * KW;
        return x_at(bcol_base + ci * p.h * p.w, bcol_y + int(ky * DH), bcol_x + int(kx * DW),
                    bcol_ok && k < kend);
    } else if (PASS == CONV_PASS_DATA) { /* k = o KK + ky KW + kx */
        uint o = k / KK, t = k - o * KK, ky = t / KW, kx = t - ky * KW;
        int ty = bcol_y - int(ky * DH), tx = bcol_x - int(kx * DW); /* = oy SH, ox SW */
        uint oy = uint(ty) / SH, ox = uint(tx) / SW;
        bool ok = bcol_ok && k < kend && ty >= 0 && tx >= 0 && oy * SH == uint(ty) &&
                  ox * SW == uint(tx) && oy < p.oh && ox < p.ow;
        uint i = bcol_base + o * p.oh * p.ow + (ok ? oy * p.ow + ox : 0u);
        return ok ? dy_at(G_AT(p.b_off + i), i) : 0.0;
    } else { /* column n = ci KK + ky KW + kx, or the bias gradient's column of ones */
        if (!wk_ok || n >= p.ncols)
            return 0.0;
        if (n == p.bias_col)
            return 1.0;
        uint ci = n / KK, t = n - ci * KK, ky = t / KW, kx = t - ky * KW;
        return x_at((wk_s * p.c + gi * cg + ci) * p.h * p.w,
                    int(wk_oy * SH) - int(p.ph) + int(ky * DH),
                    int(wk_ox * SW) - int(p.pw) + int(kx * DW), true);
    }
}

/* Slab k0 (k < kend) into ra, rb. */
void fetch(uint tid, uint row0, uint col0, uint k0, uint kend, uint gi)
{
    if (PASS == CONV_PASS_WEIGHT)
        locate_k(k0 + tid % BK, kend);
    [[unroll]] for (uint e = 0; e < LA; e++) {
        uint q = tid + e * THREADS;
        ra[e] = load_a(row0 + q / BK, k0 + q % BK, kend, gi);
    }
    [[unroll]] for (uint e = 0; e < LB; e++) {
        uint q = tid + e * THREADS;
        if (B_BY_N)
            rb[e] = load_b(k0 + q / BN, col0 + q % BN, kend, gi);
        else
            rb[e] = load_b(k0 + q % BK, col0 + q / BK, kend, gi);
    }
}

/* The tensor index of output column `col` (FORWARD: y's (s, 0, q); DATA: dx's
 * (s, 0, iy, ix)), or NONE past N. */
uint out_column(uint col)
{
    if (col >= p.ncols)
        return NONE;
    if (PASS == CONV_PASS_FORWARD) {
        uint P = p.oh * p.ow, s = col / P;
        return s * p.oc * P + (col - s * P);
    }
    uint HW = p.h * p.w, s = col / HW;
    return s * p.c * HW + (col - s * HW);
}

/* attention_impl.h - what attention.c (checks, the variant table) shares with the
 * dispatch code of each kernel: attention_rows.c (shaders/attention.comp) and
 * attention_flash.c (shaders/attention_flash.comp). Internal to engine/kernels. */
#ifndef VKT_KERNELS_ATTENTION_IMPL_H
#define VKT_KERNELS_ATTENTION_IMPL_H

#include "kernels/attention.h"
#include "push_attention.h"

/* The arguments of a call, by slot. Slots a call does not use alias qkv as reads. */
enum { KA_QKV, KA_Y, KA_SAVED, KA_CTRL, KA_DQKV, KA_WS, KA_DY, KA_SLOTS };

/* A checked call: its sizes, plan and views (counts in elements). */
typedef struct ka_call {
    const char *fn;
    vkt_context *ctx;
    uint32_t b, t, heads, d;
    float p_drop, beta;     /* beta: the backward's */
    uint64_t seed, b0;
    uint64_t b_row;         /* sequences per control-block row (ctrl.h CTRL_ROW0; 0: none) */
    vkt_dtype lp;           /* FP32, or the 16-bit type of qkv and dy (ka_attention_lowp) */
    ka_plan plan;           /* ka_attention_plan for the context's variant */
    vkt_view view[KA_SLOTS];
    uint64_t count[KA_SLOTS];
    int used[KA_SLOTS], write[KA_SLOTS];
} ka_call;

/* The element size of a slot's view in bytes: 2 for qkv and dy (and the unused slots,
 * which alias qkv) of a 16-bit call, else 4. */
uint32_t ka_size(const ka_call *c, int slot);

/* Fills the sizes shared by both directions (fp32; slots not used alias qkv as reads);
 * then, for a backward, its slots. */
void ka_setup(ka_call *c, const char *fn, vkt_view qkv, vkt_view y, vkt_view saved,
              vkt_view ctrl, uint32_t b, uint32_t t, uint32_t heads, uint32_t d, float p_drop,
              uint64_t seed, uint64_t b0, uint64_t b_row);
void ka_setup_backward(ka_call *c, vkt_view dy, vkt_view dqkv, float beta, vkt_view workspace);
/* Checks a call and plans it (for the attention_lowp variant when c->lp is 16-bit). */
vkt_status ka_check(vkt_stream *s, ka_call *c);
/* Records a checked call's forward or backward in its plan's variant. */
vkt_status ka_run(vkt_stream *s, const ka_call *c, int backward);

/* The push constants both kernels share (sizes, scale, dropout, offsets of every slot);
 * blocks from the plan's pass. */
struct push_attention ka_push(const ka_call *c, const ka_pass *pass);

/* The dispatch argument of a slot. */
gpu_arg ka_arg(const ka_call *c, int slot);

/* Record a checked call's forward (1 dispatch) or backward (2). */
vkt_status ka_rows_forward(vkt_stream *s, const ka_call *c);
vkt_status ka_rows_backward(vkt_stream *s, const ka_call *c);
vkt_status ka_flash_forward(vkt_stream *s, const ka_call *c);
vkt_status ka_flash_backward(vkt_stream *s, const ka_call *c);
/* attention_lowp_coopmat / _frag (attention_cm.c): the forward (1 dispatch) and the
 * backward (2: by query blocks, then by key blocks) on fragments */
vkt_status ka_cm_forward(vkt_stream *s, const ka_call *c);
vkt_status ka_cm_backward(vkt_stream *s, const ka_call *c);

#endif

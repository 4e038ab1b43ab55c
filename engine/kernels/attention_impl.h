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
    ka_plan plan;           /* ka_attention_plan for the context's variant */
    vkt_view view[KA_SLOTS];
    uint64_t count[KA_SLOTS];
    int used[KA_SLOTS], write[KA_SLOTS];
} ka_call;

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

#endif

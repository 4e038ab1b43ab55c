/* pipe_async_world.c - async copies of the pipeline across ranks (pipe_engine.h's "async
 * ranks" route; docs/async.md, "Pipeline stages across ranks").
 *
 * R = P x D ranks, rank c P + s holding copy c's stage s (pipe_world.c). Stage s's master
 * is a parameter server sharded over the stage's D ranks: rank c P + s serves shard c of
 * the stage's trained values, [n c / D, n (c + 1) / D). A stage only ever pushes to and
 * pulls from its own stage's shards, so the server carries no per-worker subsets: each
 * stage is a server of its own. The copies still meet once per step in the step's tail
 * (pipe_world.c: losses, stop, failures; with this route no gradient is summed there), as
 * the one-process engine's threads do (pipe_async.c), so a step is:
 *   begin: seed := the stage's parameters (every copy of the stage holds the same: each
 *          pulled the whole master at the end of the step before);
 *   push:  after the copy's own optimizer ran on its own gradient (its share 1 / D of the
 *          batch), its new trained values kept;
 *   end:   each shard's server gets its slice of the new values from every copy (a
 *          message; its own copy's a call) and applies the pushes in the order they
 *          arrive, as pipe_async_push does: master := new where it still holds the seed,
 *          else master + (new - seed); each push's staleness is the pushes into the shard
 *          before it this step (0 .. D - 1, as in one process); the server answers every
 *          copy with its shard and that copy's staleness; every rank's trained values :=
 *          the D shards (its states, e.g. batch norm's running averages, stay its own).
 * Every pull of step k sees every push of step k - 1 (a step lag of 0): within any
 * staleness bound. With one copy the own push is the only one: master := new, so the
 * run equals the sync stages across ranks bit for bit. After the tail said go, every rank
 * of a stage sends and answers each message once, even when its own update failed (it
 * then pushes its seed: no change), so no peer waits for one that never comes; a wait past
 * the world's deadline marks the world broken, naming the rank.
 * Each rank counts the staleness of its own pushes (shard 0's answer: one count per
 * update, as the parameter server's shard 0 counts); pipe_staleness_gather sums them
 * over the ranks. The rank's one stage thread is the caller's, the one calling MPI. */
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pipe_engine.h"

#define TAG_PUSH 21 /* below pipe_world.c's TAG_BASE; clear of the parameter server's */
#define TAG_PULL 22

struct pipe_aworld {
    uint64_t n, n_params;  /* the local stage's trained values, parameters */
    float *seed, *now;     /* [n_params]: at the step's start; after the optimizer */
    float *shard;          /* [len(c)] the master's slice this rank serves */
    float *in;             /* [D][max len]: the copies' pushes into that slice */
    float *out;            /* [D][1 + len(c)]: the answers: staleness, the slice */
    float *pulled;         /* [D][1 + max len]: every server's answer */
    uint64_t *stale;       /* [D] the staleness of each copy's push into the slice */
    world_req **req;       /* [3 D]: push receives, answer receives, sends */
    int pushed;            /* the copy's optimizer ran this step: `now` holds its values */
    int stranded;          /* a failed exchange left requests in flight into these buffers */
    pipe_aworld *next;     /* on the stranded list (pipe_async_world_free) */
};

/* The stranded exchanges' buffers: MPI may still write into in, pulled (or read out,
 * now, seed) of a request given up on, so they are kept, reachable, until the process
 * ends, as world_abandon keeps the requests. Rank threads (tests/world_threads.c) may
 * push at once: a lock-free list. */
static _Atomic(pipe_aworld *) stranded_list;

static uint64_t off_of(const pipe_aworld *a, uint32_t D, uint32_t j) { return a->n * j / D; }
static uint64_t len_of(const pipe_aworld *a, uint32_t D, uint32_t j)
{
    return off_of(a, D, j + 1) - off_of(a, D, j);
}

static uint32_t rank_of(const vkt_pipeline *p, uint32_t copy, uint32_t stage)
{
    return copy * p->P + stage;
}

vkt_status pipe_async_world_make(vkt_pipeline *p)
{
    pstage *s = &p->st[p->here];
    uint32_t D = p->D;
    pipe_aworld *a = calloc(1, sizeof *a);
    if (!a)
        return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for the masters");
    p->aw = a;
    a->n = s->n_train;
    a->n_params = s->n_params;
    uint64_t most = a->n / D + 2; /* 1 + the longest slice */
    if (most > INT_MAX / 4) /* one message (world_isend) carries at most INT_MAX bytes */
        return pipe_fail(p, VKT_ERROR_LIMIT, "%s: stage %u's %llu trained values in %u slices "
                         "(one per copy): a slice's message of up to %llu bytes exceeds MPI's "
                         "%d; more copies make the slices smaller", p->opt.fn, s->index,
                         (unsigned long long)a->n, D, (unsigned long long)most * 4, INT_MAX);
    a->seed = malloc((a->n_params + 1) * sizeof *a->seed);
    a->now = malloc((a->n_params + 1) * sizeof *a->now);
    a->shard = malloc(most * sizeof *a->shard);
    a->in = malloc(D * most * sizeof *a->in);
    a->out = malloc(D * most * sizeof *a->out);
    a->pulled = malloc(D * most * sizeof *a->pulled);
    a->stale = calloc(D, sizeof *a->stale);
    a->req = calloc(3 * (uint64_t)D, sizeof *a->req);
    if (!a->seed || !a->now || !a->shard || !a->in || !a->out || !a->pulled || !a->stale ||
        !a->req)
        return pipe_fail(p, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for the masters");
    return VKT_OK;
}

void pipe_async_world_free(vkt_pipeline *p)
{
    pipe_aworld *a = p->aw;
    if (!a)
        return;
    p->aw = NULL;
    if (a->stranded) {
        a->next = atomic_load(&stranded_list);
        while (!atomic_compare_exchange_weak(&stranded_list, &a->next, a))
            ;
        return;
    }
    free(a->seed);
    free(a->now);
    free(a->shard);
    free(a->in);
    free(a->out);
    free(a->pulled);
    free(a->stale);
    free(a->req);
    free(a);
}

vkt_status pipe_async_world_begin(vkt_pipeline *p)
{
    pipe_aworld *a = p->aw;
    pstage *s = &p->st[p->here];
    a->pushed = 0;
    if (!a->n)
        return VKT_OK; /* nothing trained on this stage: no copy of it exchanges */
    s->cur = s->model;
    vkt_status st = vkt_model_read_params(s->model, a->seed, a->n_params);
    return st == VKT_OK ? st : pipe_model_fail(s, st, "reading its parameters for the seed");
}

vkt_status pipe_async_world_push(pstage *s)
{
    pipe_aworld *a = s->p->aw;
    vkt_status st = vkt_model_read_params(s->model, a->now, a->n_params);
    if (st != VKT_OK)
        return pipe_model_fail(s, st, "reading its parameters for the push");
    a->pushed = 1;
    return VKT_OK;
}

/* The push of copy j into this rank's slice (src: its new values of the slice). */
static void apply(pipe_aworld *a, uint32_t D, uint32_t me, uint32_t j, const float *src,
                  uint64_t *applied)
{
    const float *was = a->seed + off_of(a, D, me);
    for (uint64_t i = 0; i < len_of(a, D, me); i++) {
        float m = a->shard[i];
        a->shard[i] = m == was[i] ? src[i] : m + (src[i] - was[i]);
    }
    a->stale[j] = (*applied)++;
}

/* After a failed exchange: every request still in flight (receives posted, sends not
 * waited for) given up on, never dropped (world.h: left in flight, kept reachable), and
 * the buffers they use kept past pipe_async_world_free. */
static void strand(vkt_pipeline *p)
{
    pipe_aworld *a = p->aw;
    for (uint32_t j = 0; j < 3 * p->D; j++)
        if (a->req[j]) {
            world_abandon(p->world, a->req[j]);
            a->req[j] = NULL;
            a->stranded = 1;
        }
}

/* A failure of the exchange: the world is broken for this rank from now on. */
static vkt_status broken(pstage *s, vkt_status st, const char *what)
{
    s->p->world_broken = 1;
    return pipe_stage_fail(s, st, what, vkt_world_errmsg(s->p->world));
}

/* Completes request slot i: freed by the wait when done; on a failure left in flight by
 * world_wait itself (world.h) or freed by it (an MPI error), so the slot is cleared
 * either way and strand() never gives it up twice. */
static vkt_status wait_slot(pstage *s, uint32_t i, const char *what)
{
    pipe_aworld *a = s->p->aw;
    vkt_status st = world_wait(s->p->world, a->req[i]);
    a->req[i] = NULL;
    if (st == VKT_OK)
        return st;
    a->stranded = 1; /* MPI may still use its buffer */
    return broken(s, st, what);
}

/* Serves this rank's slice: the pushes that already arrived, its own, then the rest as
 * they arrive (polled; the world's deadline). */
static vkt_status serve(pstage *s, const float *mine)
{
    vkt_pipeline *p = s->p;
    pipe_aworld *a = p->aw;
    vkt_world *w = p->world;
    uint32_t D = p->D, me = s->copy;
    uint64_t applied = 0, most = a->n / D + 2;
    memcpy(a->shard, a->seed + off_of(a, D, me), len_of(a, D, me) * sizeof *a->shard);
    double t0 = plat_now();
    int own = 0;
    for (uint32_t idle = 0; applied < D;) {
        int any = 0;
        for (uint32_t j = 0; j < D; j++) {
            if (j == me || !a->req[j])
                continue;
            int done = world_test(w, a->req[j]);
            if (done < 0) {
                a->req[j] = NULL;
                return broken(s, VKT_ERROR_INTERNAL, "receiving a push");
            }
            if (done) {
                a->req[j] = NULL;
                apply(a, D, me, j, a->in + j * most, &applied);
                any = 1;
            }
        }
        if (!own) { /* after what had arrived when it came */
            apply(a, D, me, me, mine + off_of(a, D, me), &applied);
            own = any = 1;
        }
        if (any) {
            idle = 0;
            t0 = plat_now();
        } else if (plat_now() - t0 > w->timeout) {
            for (uint32_t j = 0; j < D; j++)
                if (j != me && a->req[j]) { /* left in flight: strand() */
                    p->world_broken = 1;
                    char msg[160];
                    snprintf(msg, sizeof msg, "rank %u did not push in %.0f s: it is late or "
                             "hung", rank_of(p, j, s->index), w->timeout);
                    return pipe_stage_fail(s, VKT_ERROR_TIMEOUT, "the stage's master", msg);
                }
        } else {
            world_backoff(w, idle < 6 ? idle++ : idle);
        }
    }
    return VKT_OK;
}

vkt_status pipe_async_world_end(vkt_pipeline *p)
{
    pipe_aworld *a = p->aw;
    pstage *s = &p->st[p->here];
    vkt_world *w = p->world;
    if (!a->n || !p->world_go || p->world_broken)
        return VKT_OK; /* the tail said no update: nothing pushed anywhere */
    uint32_t D = p->D, me = s->copy;
    uint64_t most = a->n / D + 2, mine_len = len_of(a, D, me);
    const float *mine = a->pushed ? a->now : a->seed; /* a failed update: no change */
    vkt_status st = VKT_OK;
    for (uint32_t j = 0; j < D && st == VKT_OK; j++) { /* receives first, then the sends */
        if (j == me)
            continue;
        uint32_t peer = rank_of(p, j, s->index);
        if ((st = world_irecv(w, peer, TAG_PUSH, a->in + j * most, mine_len * 4,
                              &a->req[j])) != VKT_OK ||
            (st = world_irecv(w, peer, TAG_PULL, a->pulled + j * most,
                              (1 + len_of(a, D, j)) * 4, &a->req[D + j])) != VKT_OK)
            st = broken(s, st, "posting a receive");
    }
    for (uint32_t j = 0; j < D && st == VKT_OK; j++)
        if (j != me && (st = world_isend(w, rank_of(p, j, s->index), TAG_PUSH,
                                         mine + off_of(a, D, j), len_of(a, D, j) * 4,
                                         &a->req[2 * D + j])) != VKT_OK)
            st = broken(s, st, "pushing");
    if (st == VKT_OK)
        st = serve(s, mine);
    for (uint32_t j = 0; j < D && st == VKT_OK; j++) { /* the answers */
        if (j == me)
            continue;
        float *o = a->out + j * most;
        o[0] = (float)a->stale[j];
        memcpy(o + 1, a->shard, mine_len * sizeof *o);
        if ((st = wait_slot(s, 2 * D + j, "pushing")) == VKT_OK && /* its push: slot free */
            (st = world_isend(w, rank_of(p, j, s->index), TAG_PULL, o, (1 + mine_len) * 4,
                              &a->req[2 * D + j])) != VKT_OK)
            st = broken(s, st, "answering a pull");
    }
    for (uint32_t j = 0; j < D && st == VKT_OK; j++) /* every server's answer */
        if (j != me)
            st = wait_slot(s, D + j, "pulling");
    for (uint32_t j = 0; j < D && st == VKT_OK; j++) /* the answers, sent */
        if (j != me)
            st = wait_slot(s, 2 * D + j, "answering a pull");
    if (st != VKT_OK) {
        strand(p); /* the requests still in flight */
        return VKT_OK; /* the stage's failure is the step's message */
    }
    /* the pulled master into the trained values; the states stay */
    float *v = a->now;
    if (!a->pushed && a->n_params > a->n)
        memcpy(v + a->n, a->seed + a->n, (a->n_params - a->n) * sizeof *v);
    for (uint32_t j = 0; j < D; j++)
        memcpy(v + off_of(a, D, j), j == me ? a->shard : a->pulled + j * most + 1,
               len_of(a, D, j) * sizeof *v);
    pipe_async_count(p, s->index, me == 0 ? a->stale[me] : (uint64_t)a->pulled[0]);
    s->cur = s->model;
    st = vkt_model_write_params(s->model, v, a->n_params);
    if (st != VKT_OK)
        pipe_model_fail(s, st, "pulling its master");
    return VKT_OK;
}

/* ps.c - the parameter-server exchange (exchange.h): asynchronous data parallelism
 * across processes, a sharded parameter server (docs/distributed.md). Rank j owns shard
 * j of the flat master, [P*j/R, P*(j+1)/R), and one communication thread per rank both
 * serves its shard and carries its replicas' requests to every shard, with two-sided
 * nonblocking messages (not MPI one-sided: on Open MPI 4.1 over TCP a one-sided
 * accumulate waits for a busy target). The thread is the only one that calls MPI during
 * the run. A replica's requests to its own rank's shard are function calls, not
 * messages.
 *
 * One update of global replica g at its k-th step: PULL(g,k) to every shard, each
 * answered with its slice of the master (the stale-synchronous gate: with a bound s the
 * server defers the answer until every replica has k - s pushes on that shard); forward,
 * backward and the replica's own optimizer on the device; PUSH(g,k, new - pulled) to
 * every shard, which adds it (one thread per shard: no update is lost) and answers with
 * the staleness (shard versions between this replica's pull and its push). With s = 0 a
 * push of step k also waits until every replica pulled for step k, so every read of
 * step k sees exactly all pushes of step k-1 on every shard: the result equals sync.
 * STOP (the chief's callback), FAIL (a replica's error) and DONE (a replica finished)
 * end the run; the servers answer what waits with the reason. */
#include "parallel/apply.h"
#include "parallel/exchange.h"
#include "parallel/exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_REQ = 11, TAG_REP = 12 };
enum { PS_PULL = 1, PS_PUSH, PS_STOP, PS_FAIL, PS_DONE, PS_SNAP };
enum { OUT_OK = 0, OUT_STOP, OUT_FAIL };
#define PS_HIST 1024 /* staleness histogram bins (the last counts everything above) */

typedef struct ps_msg {
    uint32_t type, g;      /* request type, global replica */
    uint64_t k, aux;       /* step; reply: staleness (push), shard version (pull) */
    uint32_t outcome, rank;/* reply: OUT_*; the rank that failed */
    /* a push: the replica's loss scaler after its step (apply_scaler reads every one) */
    uint64_t sc_skipped;
    float sc_scale;
    uint32_t sc_clean, sc_in_a_row, sc_pad;
} ps_msg;

typedef struct deferred {
    ps_msg m;
    uint32_t src;
    float *delta;          /* a deferred push's change of the shard */
} deferred;

typedef struct slot {      /* one local replica's request in flight */
    uint32_t type;
    uint64_t k;
    int submitted;         /* waiting for the communication thread to send it */
    uint32_t waiting;      /* replies still to come */
    int outcome;
    uint32_t fail_rank;
    uint64_t stale;
} slot;

typedef struct sendbuf {
    world_req *req;
    void *buf;
} sendbuf;

/* One fit's state. */
struct ps {
    vkt_trainer *t;
    exchange *x;           /* its pulled arrays */
    vkt_world *w;
    uint32_t R, me, G;
    uint64_t P, *off;      /* shard j is [off[j], off[j+1]) */
    /* the server of shard `me` */
    float *master;
    uint64_t version, *clock, *pulls, *pulled_version;
    deferred *dq;
    uint32_t n_dq;
    int stopped, failed;
    uint32_t failed_rank, done;
    /* the client side */
    plat_monitor *mon;      /* slots, snapshot, quit */
    slot *slots;
    uint32_t local_done;
    float *snap;           /* a snapshot asked by the chief's thread, and parts to come */
    uint32_t snap_waiting;
    int snap_submitted;
    sendbuf *sends;
    uint32_t n_sends, cap_sends;
    void *rx;
    uint64_t rx_cap;
    plat_thread *thread;
    vkt_status status;     /* the thread's own failure (MPI, timeout), under mon */
    char errmsg[VKT_ERRMSG_SIZE];
    uint64_t hist[PS_HIST + 1];
    double wait0[TRAINER_MAX_REPLICAS]; /* the replicas' wait_seconds at the start */
    uint64_t bytes0;                    /* the world's comm_bytes at the start */
};

/* The exchange: the world, and the state of the fit under way; every global replica's
 * loss scaler as of its last push this shard served (every push reaches every shard), so
 * each rank reports the world's (apply_scaler), across fits. */
typedef struct ps_exchange {
    exchange base;
    vkt_world *w;
    struct ps *run;
    plat_monitor *sc_mon;  /* the communication thread writes, the trainer's threads read */
    loss_scaler *sc;       /* [world replicas] */
    uint8_t *sc_known;
} ps_exchange;

static ps_exchange *of(exchange *x) { return (ps_exchange *)x; }

static uint64_t shard_len(const struct ps *ps, uint32_t j) { return ps->off[j + 1] - ps->off[j]; }

/* The thread's failure: every waiting replica is answered with it. */
static void ps_fail(struct ps *ps, vkt_status st, const char *msg)
{
    plat_monitor_lock(ps->mon);
    if (ps->status == VKT_OK) {
        ps->status = st;
        snprintf(ps->errmsg, sizeof ps->errmsg, "%s", msg);
    }
    plat_monitor_broadcast(ps->mon);
    plat_monitor_unlock(ps->mon);
}

/* ---- sending ------------------------------------------------------------------ */

static void send_msg(struct ps *ps, uint32_t dst, int tag, const ps_msg *m, const float *data,
                     uint64_t n)
{
    uint64_t bytes = sizeof *m + n * sizeof(float);
    char *buf = malloc(bytes);
    if (!buf || (ps->n_sends == ps->cap_sends &&
                 !(ps->sends = realloc(ps->sends, (ps->cap_sends = ps->cap_sends * 2 + 16) *
                                                      sizeof *ps->sends)))) {
        free(buf);
        ps_fail(ps, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for a message");
        return;
    }
    memcpy(buf, m, sizeof *m);
    if (n)
        memcpy(buf + sizeof *m, data, n * sizeof(float));
    world_req *req = NULL;
    vkt_status st = world_isend(ps->w, dst, tag, buf, bytes, &req);
    if (st != VKT_OK) {
        free(buf);
        ps_fail(ps, st, vkt_world_errmsg(ps->w));
        return;
    }
    ps->sends[ps->n_sends++] = (sendbuf){req, buf};
}

/* Sends that completed give their buffers back. */
static void reap_sends(struct ps *ps)
{
    for (uint32_t i = 0; i < ps->n_sends;) {
        int done = world_test(ps->w, ps->sends[i].req);
        if (done == 0) {
            i++;
            continue;
        }
        if (done < 0)
            ps_fail(ps, VKT_ERROR_INTERNAL, vkt_world_errmsg(ps->w));
        free(ps->sends[i].buf);
        ps->sends[i] = ps->sends[--ps->n_sends];
    }
}

/* ---- the client side: replies for this rank's replicas -------------------------- */

static void client_reply(struct ps *ps, uint32_t src, const ps_msg *m, const float *data)
{
    vkt_trainer *t = ps->t;
    plat_monitor_lock(ps->mon);
    if (m->type == PS_SNAP) {
        if (ps->snap)
            memcpy(ps->snap + ps->off[src], data, shard_len(ps, src) * sizeof(float));
        ps->snap_waiting--;
    } else {
        uint32_t q = m->g - t->rep_base;
        slot *s = &ps->slots[q];
        if (m->outcome != OUT_OK && s->outcome == OUT_OK) {
            s->outcome = (int)m->outcome;
            s->fail_rank = m->rank;
        }
        if (m->type == PS_PULL && m->outcome == OUT_OK)
            memcpy(ps->x->pulled[q] + ps->off[src], data, shard_len(ps, src) * sizeof(float));
        if (m->type == PS_PUSH && src == 0)
            s->stale = m->aux;
        s->waiting--;
    }
    plat_monitor_broadcast(ps->mon);
    plat_monitor_unlock(ps->mon);
}

/* A reply from this rank's server: to a local replica directly, else a message. */
static void reply(struct ps *ps, uint32_t dst, const ps_msg *m, const float *data, uint64_t n)
{
    if (dst == ps->me)
        client_reply(ps, ps->me, m, data);
    else
        send_msg(ps, dst, TAG_REP, m, data, n);
}

/* ---- the server of shard `me` ----------------------------------------------------- */

static int pull_allowed(const struct ps *ps, uint64_t k)
{
    const vkt_trainer_options *o = &ps->t->opt;
    return !o->bounded_staleness || exchange_min(ps->clock, ps->G) + o->staleness >= k;
}

static int push_allowed(const struct ps *ps, uint64_t k)
{
    const vkt_trainer_options *o = &ps->t->opt;
    return !o->bounded_staleness || o->staleness != 0 || exchange_min(ps->pulls, ps->G) >= k + 1;
}

static void answer_pull(struct ps *ps, uint32_t src, const ps_msg *m)
{
    ps_msg r = {.type = PS_PULL, .g = m->g, .k = m->k, .aux = ps->version};
    if (ps->failed || ps->stopped) {
        r.outcome = ps->failed ? OUT_FAIL : OUT_STOP;
        r.rank = ps->failed_rank;
        reply(ps, src, &r, NULL, 0);
        return;
    }
    ps->pulls[m->g]++;
    ps->pulled_version[m->g] = ps->version;
    reply(ps, src, &r, ps->master, shard_len(ps, ps->me));
}

static void apply_push(struct ps *ps, uint32_t src, const ps_msg *m, const float *delta)
{
    ps_msg r = {.type = PS_PUSH, .g = m->g, .k = m->k};
    if (ps->failed) {
        r.outcome = OUT_FAIL;
        r.rank = ps->failed_rank;
    } else {
        uint64_t n = shard_len(ps, ps->me);
        for (uint64_t i = 0; i < n; i++)
            ps->master[i] += delta[i];
        ps->version++;
        ps->clock[m->g]++;
        r.aux = ps->version - 1 - ps->pulled_version[m->g];
        uint64_t b = r.aux < PS_HIST ? r.aux : PS_HIST;
        if (ps->me == 0)
            ps->hist[b]++; /* shard 0's count stands for the update */
    }
    reply(ps, src, &r, NULL, 0);
}

static void defer(struct ps *ps, uint32_t src, const ps_msg *m, const float *delta)
{
    deferred *d = &ps->dq[ps->n_dq]; /* at most one request per replica waits */
    d->m = *m;
    d->src = src;
    d->delta = NULL;
    if (delta) {
        uint64_t n = shard_len(ps, ps->me);
        d->delta = malloc((n ? n : 1) * sizeof(float));
        if (!d->delta) {
            ps_fail(ps, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for a deferred push");
            return;
        }
        memcpy(d->delta, delta, n * sizeof(float));
    }
    ps->n_dq++;
}

/* Answers what waited and may go now (after any change of counters or of the state). */
static void serve_deferred(struct ps *ps)
{
    for (int again = 1; again;) {
        again = 0;
        for (uint32_t i = 0; i < ps->n_dq; i++) {
            deferred d = ps->dq[i];
            int push = d.m.type == PS_PUSH;
            int go = ps->failed || ps->stopped ||
                     (push ? push_allowed(ps, d.m.k) : pull_allowed(ps, d.m.k));
            if (!go)
                continue;
            ps->dq[i] = ps->dq[--ps->n_dq];
            if (push)
                apply_push(ps, d.src, &d.m, d.delta);
            else
                answer_pull(ps, d.src, &d.m);
            free(d.delta);
            again = 1;
            break;
        }
    }
}

static void ps_scaler_set(exchange *x, uint32_t g, const loss_scaler *sc)
{
    ps_exchange *px = of(x);
    plat_monitor_lock(px->sc_mon);
    px->sc[g] = *sc;
    px->sc_known[g] = 1;
    plat_monitor_unlock(px->sc_mon);
}

static int ps_scaler_get(exchange *x, uint32_t g, loss_scaler *out)
{
    ps_exchange *px = of(x);
    plat_monitor_lock(px->sc_mon);
    int known = px->sc_known[g];
    if (known)
        *out = px->sc[g];
    plat_monitor_unlock(px->sc_mon);
    return known;
}

static void serve(struct ps *ps, uint32_t src, const ps_msg *m, const float *data)
{
    if (m->type == PS_PUSH && ps->t->rep[0].sc.guard) {
        loss_scaler sc = ps->t->rep[0].sc; /* the settings; the state from the push */
        sc.skipped = m->sc_skipped;
        sc.scale = m->sc_scale;
        sc.clean = m->sc_clean;
        sc.in_a_row = m->sc_in_a_row;
        ps_scaler_set(ps->x, m->g, &sc);
    }
    switch (m->type) {
    case PS_PULL:
        if (ps->failed || ps->stopped || pull_allowed(ps, m->k))
            answer_pull(ps, src, m);
        else
            defer(ps, src, m, NULL);
        break;
    case PS_PUSH:
        if (ps->failed || ps->stopped || push_allowed(ps, m->k))
            apply_push(ps, src, m, data);
        else
            defer(ps, src, m, data);
        break;
    case PS_STOP:
        ps->stopped = 1;
        break;
    case PS_FAIL:
        if (!ps->failed) {
            ps->failed = 1;
            ps->failed_rank = m->rank;
        }
        break;
    case PS_DONE:
        ps->done++;
        break;
    case PS_SNAP: {
        ps_msg r = {.type = PS_SNAP, .g = m->g};
        reply(ps, src, &r, ps->master, shard_len(ps, ps->me));
        return;
    }
    }
    serve_deferred(ps);
}

/* ---- the communication thread --------------------------------------------------- */

/* A request of local replica q (or the snapshot) to every shard. */
static void scatter(struct ps *ps, uint32_t type, uint32_t g, uint64_t k, const replica *r)
{
    for (uint32_t j = 0; j < ps->R; j++) {
        ps_msg m = {.type = type, .g = g, .k = k, .rank = ps->me};
        if (type == PS_PUSH) /* its replica waits for the replies: its scaler holds still */
            m = (ps_msg){.type = type, .g = g, .k = k, .rank = ps->me,
                         .sc_skipped = r->sc.skipped, .sc_scale = r->sc.scale,
                         .sc_clean = r->sc.clean, .sc_in_a_row = r->sc.in_a_row};
        const float *data = NULL;
        uint64_t n = 0;
        float *delta = NULL;
        if (type == PS_PUSH) { /* the shard's change: new - pulled */
            n = shard_len(ps, j);
            delta = malloc((n ? n : 1) * sizeof *delta);
            if (!delta) {
                ps_fail(ps, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for a push");
                return;
            }
            const float *pulled = ps->x->pulled[r->index];
            for (uint64_t i = 0; i < n; i++)
                delta[i] = r->stage_host[ps->off[j] + i] - pulled[ps->off[j] + i];
            data = delta;
        }
        if (j == ps->me)
            serve(ps, ps->me, &m, data);
        else
            send_msg(ps, j, TAG_REQ, &m, data, n);
        free(delta);
    }
}

/* Requests the local replicas (and the chief's snapshot) handed over. */
static int take_local(struct ps *ps)
{
    vkt_trainer *t = ps->t;
    int any = 0;
    for (uint32_t q = 0; q < t->n_rep; q++) {
        plat_monitor_lock(ps->mon);
        slot s = ps->slots[q];
        ps->slots[q].submitted = 0;
        plat_monitor_unlock(ps->mon);
        if (!s.submitted)
            continue;
        any = 1;
        scatter(ps, s.type, t->rep_base + q, s.k, &t->rep[q]);
        if (s.type == PS_DONE || s.type == PS_STOP || s.type == PS_FAIL) {
            plat_monitor_lock(ps->mon); /* no replies to these */
            ps->slots[q].waiting = 0;
            ps->local_done += s.type == PS_DONE;
            plat_monitor_broadcast(ps->mon);
            plat_monitor_unlock(ps->mon);
        }
    }
    plat_monitor_lock(ps->mon);
    int snap = ps->snap_submitted;
    ps->snap_submitted = 0;
    plat_monitor_unlock(ps->mon);
    if (snap) {
        any = 1;
        scatter(ps, PS_SNAP, 0, 0, NULL);
    }
    return any;
}

/* Messages that arrived: requests for this shard, replies for this rank's replicas. */
static int take_remote(struct ps *ps)
{
    int any = 0;
    for (int tag = TAG_REQ; tag <= TAG_REP; tag++)
        for (;;) {
            uint32_t src = UINT32_MAX;
            uint64_t bytes = 0;
            vkt_status st = world_try_recv(ps->w, tag, ps->rx, ps->rx_cap, &src, &bytes);
            if (st != VKT_OK) {
                ps_fail(ps, st, vkt_world_errmsg(ps->w));
                return any;
            }
            if (src == UINT32_MAX)
                break;
            any = 1;
            const ps_msg *m = ps->rx;
            const float *data = (const float *)((const char *)ps->rx + sizeof *m);
            if (tag == TAG_REQ)
                serve(ps, src, m, data);
            else
                client_reply(ps, src, m, data);
        }
    return any;
}

static int finished(struct ps *ps)
{
    plat_monitor_lock(ps->mon);
    int local = ps->local_done == ps->t->n_rep;
    plat_monitor_unlock(ps->mon);
    return local && ps->done == ps->G && ps->n_sends == 0;
}

static void comm_thread(void *arg)
{
    struct ps *ps = arg;
    uint32_t idle = 0;
    double last = plat_now();
    while (!finished(ps)) {
        int any = take_local(ps);
        any |= take_remote(ps);
        reap_sends(ps);
        plat_monitor_lock(ps->mon);
        int failed = ps->status != VKT_OK;
        plat_monitor_unlock(ps->mon);
        if (failed)
            return;
        if (any) {
            idle = 0;
            last = plat_now();
        } else if (plat_now() - last > ps->w->timeout && ps->n_dq == 0 && ps->done < ps->G &&
                   ps->local_done == ps->t->n_rep) {
            char msg[256];
            snprintf(msg, sizeof msg, "the parameter servers heard nothing for %.0f s while "
                     "%u of %u replicas had not finished: a rank is late or hung", ps->w->timeout,
                     ps->G - ps->done, ps->G);
            ps_fail(ps, VKT_ERROR_TIMEOUT, msg);
            return;
        } else {
            world_backoff(ps->w, idle < 6 ? idle++ : idle); /* at most 32 us between polls */
        }
    }
}

/* ---- the replicas' side ---------------------------------------------------------- */

/* Hands a request to the communication thread and waits for every shard's answer.
 * Returns OUT_OK, OUT_STOP or OUT_FAIL (the replica's status then says why). */
static int request(struct ps *ps, replica *r, uint32_t type, uint64_t k)
{
    double t0 = plat_now();
    plat_monitor_lock(ps->mon);
    slot *s = &ps->slots[r->index];
    s->type = type;
    s->k = k;
    s->waiting = type == PS_PULL || type == PS_PUSH ? ps->R : 0;
    s->submitted = 1;
    int timed_out = 0;
    while ((s->submitted || s->waiting) && ps->status == VKT_OK && !timed_out) {
        plat_monitor_unlock(ps->mon);
        plat_sleep(20e-6); /* the monitor has no timed wait: poll, cheaply */
        timed_out = plat_now() - t0 > ps->w->timeout;
        plat_monitor_lock(ps->mon);
    }
    int out = s->outcome;
    uint32_t bad = s->fail_rank;
    vkt_status st = ps->status;
    char msg[VKT_ERRMSG_SIZE];
    snprintf(msg, sizeof msg, "%s", ps->errmsg);
    s->outcome = OUT_OK;
    plat_monitor_unlock(ps->mon);
    r->stats.wait_seconds += plat_now() - t0;
    if (st != VKT_OK) {
        replica_fail(r, st, "%s", msg);
        return OUT_FAIL;
    }
    if (timed_out) {
        replica_fail(r, VKT_ERROR_TIMEOUT, "step %llu: the parameter servers did not answer "
                     "a %s in %.0f s: a rank is late or hung", (unsigned long long)k + 1,
                     type == PS_PULL ? "pull" : "push", ps->w->timeout);
        return OUT_FAIL;
    }
    if (out == OUT_FAIL && bad != ps->me)
        replica_fail(r, VKT_ERROR_REMOTE, "rank %u failed (its message is in its output); "
                     "every rank stopped", bad);
    if (out == OUT_OK && (type == PS_PULL || type == PS_PUSH)) /* every shard's slice */
        exchange_count_host(r->t, r->t->param_count * 4);
    return out;
}

static vkt_status pull_into_device(struct ps *ps, replica *r, uint64_t k)
{
    int out = request(ps, r, PS_PULL, k);
    if (out != OUT_OK)
        return out == OUT_STOP ? VKT_ERROR_STATE /* stop, not an error */ : r->status;
    exchange_pulled(r); /* into the parameters at the start of its step's submission */
    return VKT_OK;
}

static void ps_job(exchange *x, replica *r)
{
    vkt_trainer *t = r->t;
    struct ps *ps = of(x)->run;
    for (uint64_t k = 0; k < t->run_steps && r->status == VKT_OK; k++) {
        if (pull_into_device(ps, r, k) != VKT_OK) /* its wait counts as waiting */
            break;
        double t0 = plat_now();
        trainer_slow_down(r);
        if (trainer_next_batch(r) != VKT_OK)
            break;
        apply_set_step(r, t->steps + k);
        if (trainer_forward_backward(r, t->steps + k) != VKT_OK) /* + optimizer, params out */
            break;
        r->stats.step_seconds += plat_now() - t0;
        if (request(ps, r, PS_PUSH, k) == OUT_FAIL)
            break;
        r->stats.steps++;
        if (r->index == 0 && trainer_is_chief(t) && t->progress &&
            trainer_progress(r, k, r->loss)) {
            if (r->status == VKT_OK) /* a stop; a failure is sent below */
                request(ps, r, PS_STOP, k);
            break;
        }
    }
    if (r->status != VKT_OK && r->status != VKT_ERROR_REMOTE)
        request(ps, r, PS_FAIL, 0);
    request(ps, r, PS_DONE, 0);
}

/* ---- set-up and end ------------------------------------------------------------- */

static void ps_free(struct ps *ps)
{
    if (!ps)
        return;
    for (uint32_t i = 0; i < ps->n_dq; i++)
        free(ps->dq[i].delta);
    for (uint32_t i = 0; i < ps->n_sends; i++)
        free(ps->sends[i].buf); /* only after a failure: the job is ending */
    plat_monitor_destroy(ps->mon);
    free(ps->off);
    free(ps->master);
    free(ps->clock);
    free(ps->pulls);
    free(ps->pulled_version);
    free(ps->dq);
    free(ps->slots);
    free(ps->sends);
    free(ps->rx);
    free(ps);
}

static vkt_status ps_begin(exchange *x)
{
    vkt_trainer *t = x->t;
    vkt_world *w = of(x)->w;
    for (uint32_t i = 0; i < t->n_rep; i++) /* a pull a stopped run left untaken is void */
        t->rep[i].pull_pending = 0;
    struct ps *ps = calloc(1, sizeof *ps);
    uint32_t R = vkt_world_size(w), G = t->world_rep;
    if (ps) {
        ps->t = t;
        ps->x = x;
        ps->w = w;
        ps->R = R;
        ps->me = vkt_world_rank(w);
        ps->G = G;
        ps->P = t->param_count;
        ps->off = calloc(R + 1, sizeof *ps->off);
        ps->clock = calloc(G, sizeof *ps->clock);
        ps->pulls = calloc(G, sizeof *ps->pulls);
        ps->pulled_version = calloc(G, sizeof *ps->pulled_version);
        ps->dq = calloc(G, sizeof *ps->dq);
        ps->slots = calloc(t->n_rep, sizeof *ps->slots);
        ps->mon = plat_monitor_create();
    }
    if (!ps || !ps->off || !ps->clock || !ps->pulls || !ps->pulled_version || !ps->dq ||
        !ps->slots || !ps->mon) {
        ps_free(ps);
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory for the parameter "
                            "server");
    }
    for (uint32_t j = 0; j <= R; j++)
        ps->off[j] = ps->P * j / R;
    uint64_t most = 0;
    for (uint32_t j = 0; j < R; j++)
        most = shard_len(ps, j) > most ? shard_len(ps, j) : most;
    ps->rx_cap = sizeof(ps_msg) + most * sizeof(float);
    ps->rx = malloc(ps->rx_cap);
    ps->master = malloc((shard_len(ps, ps->me) + 1) * sizeof *ps->master);
    float *p = x->pulled[0]; /* every rank starts from the same parameters */
    vkt_status st = ps->rx && ps->master ? vkt_model_read_params(t->rep[0].model, p, ps->P)
                                         : VKT_ERROR_OUT_OF_MEMORY;
    if (st != VKT_OK) {
        ps_free(ps);
        return trainer_fail(t, st, "the parameter server's shard: %s", vkt_last_error());
    }
    memcpy(ps->master, p + ps->off[ps->me], shard_len(ps, ps->me) * sizeof *p);
    for (uint32_t i = 0; i < t->n_rep; i++)
        ps->wait0[i] = t->rep[i].stats.wait_seconds;
    ps->bytes0 = w->comm_bytes;
    if (plat_thread_start(&ps->thread, comm_thread, ps) != 0) {
        ps_free(ps);
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "cannot start the communication "
                            "thread");
    }
    of(x)->run = ps;
    return VKT_OK;
}

/* Staleness over the world from the servers' histograms (shard 0 counts each update). */
static vkt_status gather_staleness(vkt_trainer *t, struct ps *ps)
{
    vkt_status st = world_allreduce_u64(ps->w, ps->hist, PS_HIST + 1, WORLD_SUM,
                                        "the staleness statistics");
    if (st != VKT_OK)
        return trainer_fail(t, st, "%s", vkt_world_errmsg(ps->w));
    uint64_t n = 0, max = 0;
    double sum = 0;
    for (uint32_t b = 0; b <= PS_HIST; b++) {
        n += ps->hist[b];
        sum += (double)b * ps->hist[b];
        max = ps->hist[b] ? b : max;
    }
    if (!n)
        return VKT_OK;
    uint64_t at = (uint64_t)((double)(n - 1) * 0.99), seen = 0;
    for (uint32_t b = 0; b <= PS_HIST; b++)
        if ((seen += ps->hist[b]) > at) {
            t->stats.staleness_p99 = b;
            break;
        }
    t->stats.staleness_mean = sum / (double)n;
    t->stats.staleness_max = max;
    t->stats.updates = n;
    return VKT_OK;
}

/* After the run (main thread, the communication thread gone): every shard to every rank
 * and into every replica; the world's staleness statistics. */
static vkt_status ps_end(exchange *x)
{
    vkt_trainer *t = x->t;
    struct ps *ps = of(x)->run;
    if (!ps)
        return VKT_OK;
    plat_thread_join(ps->thread);
    of(x)->run = NULL;
    vkt_status st = ps->status;
    for (uint32_t i = 0; i < t->n_rep; i++) /* waiting for the servers, this run */
        t->stats.comm_seconds += t->rep[i].stats.wait_seconds - ps->wait0[i];
    t->stats.comm_bytes += ps->w->comm_bytes - ps->bytes0;
    if (st != VKT_OK) { /* MPI failed or timed out: no more collectives */
        trainer_fail(t, st, "%s", ps->errmsg);
        ps_free(ps);
        return st;
    }
    float *p = x->pulled[0];
    memcpy(p + ps->off[ps->me], ps->master, shard_len(ps, ps->me) * sizeof *p);
    uint64_t *counts = malloc(ps->R * sizeof *counts);
    if (!counts) {
        ps_free(ps);
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    }
    for (uint32_t j = 0; j < ps->R; j++)
        counts[j] = shard_len(ps, j);
    st = world_allgatherv_f32(ps->w, p, counts, ps->off, "the master's shards");
    free(counts);
    if (st != VKT_OK)
        trainer_fail(t, st, "%s", vkt_world_errmsg(ps->w));
    if (st == VKT_OK)
        st = gather_staleness(t, ps);
    for (uint32_t i = 0; st == VKT_OK && i < t->n_rep; i++)
        if ((st = vkt_model_write_params(t->rep[i].model, p, t->param_count)) != VKT_OK)
            trainer_from_model(t, t->rep[i].model, st);
    ps_free(ps);
    return st;
}

static vkt_status ps_snapshot(exchange *x, float *flat)
{
    vkt_trainer *t = x->t;
    struct ps *ps = of(x)->run;
    double t0 = plat_now();
    plat_monitor_lock(ps->mon);
    ps->snap = flat;
    ps->snap_waiting = ps->R;
    ps->snap_submitted = 1;
    while ((ps->snap_submitted || ps->snap_waiting) && ps->status == VKT_OK &&
           plat_now() - t0 < ps->w->timeout) {
        plat_monitor_unlock(ps->mon);
        plat_sleep(20e-6);
        plat_monitor_lock(ps->mon);
    }
    int ok = !ps->snap_submitted && !ps->snap_waiting && ps->status == VKT_OK;
    ps->snap = NULL;
    plat_monitor_unlock(ps->mon);
    return ok ? VKT_OK : trainer_fail(t, VKT_ERROR_TIMEOUT, "the parameter servers did not "
                                      "send their shards for a checkpoint");
}

static void ps_destroy(exchange *x)
{
    if (!x)
        return;
    ps_free(of(x)->run); /* a fit that never ended (its thread is gone) */
    exchange_free_pulled(x);
    if (of(x)->sc_mon)
        plat_monitor_destroy(of(x)->sc_mon);
    free(of(x)->sc);
    free(of(x)->sc_known);
    free(x);
}

static vkt_status ps_create(vkt_trainer *t, vkt_world *w, exchange **out)
{
    ps_exchange *px = calloc(1, sizeof *px);
    if (!px)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    px->base.ops = &exchange_ps_ops;
    px->base.t = t;
    px->w = w;
    *out = &px->base;
    uint32_t G = vkt_world_size(w) * TRAINER_MAX_REPLICAS; /* world_rep is not known yet */
    px->sc_mon = plat_monitor_create();
    px->sc = calloc(G, sizeof *px->sc);
    px->sc_known = calloc(G, 1);
    if (!px->sc_mon || !px->sc || !px->sc_known)
        return trainer_fail(t, VKT_ERROR_OUT_OF_MEMORY, "out of host memory");
    return VKT_OK;
}

const exchange_ops exchange_ps_ops = {
    .name = "ps",
    .create = ps_create,
    .attach = exchange_attach,
    .destroy = ps_destroy,
    .begin = ps_begin,
    .job = ps_job,
    .end = ps_end,
    .snapshot = ps_snapshot,
    .scaler_get = ps_scaler_get,
    .scaler_set = ps_scaler_set,
};

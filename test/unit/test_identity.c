/* Identity backends: the static backend's claim/renew/release on the lease file (the same file
 * and values the lease keeper always wrote), the checks on a backend's answer, and the lease
 * keeper driven through an identity (fence below E, lost slot). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "cluster/identity.h"
#include "lease_fixture.h"
#include "util/counter.h"

static uint64_t worker_of_id(uint64_t id) /* layout 41/5/5/12 */
{
    return (id >> 12) & 31;
}

static void static_identity(sf_identity *id, bool ignore_corrupt)
{
    sf_identity_static_config c = {.datacenter = 2,
                                   .first_worker = 5,
                                   .origin = "ordinal of web-5",
                                   .lease_path = path,
                                   .ignore_corrupt = ignore_corrupt,
                                   .corrupt_floor_ms = T0 + 7000};
    char err[256];
    ck_assert_msg(sf_identity_static_init(id, &c, err, sizeof err) == 0, "%s", err);
}

START_TEST(test_static_claim_first_start)
{
    sf_identity id;
    static_identity(&id, false);
    char err[256], mem[1024];
    prom_buf p;
    prom_init(&p, mem, sizeof mem);
    sf_identity_metrics(&id, &p); /* nothing claimed yet: nothing to say */
    ck_assert_uint_eq(p.len, 0);
    ck_assert_msg(sf_identity_claim(&id, 3, false, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(id.slots.datacenter, 2);
    ck_assert_uint_eq(id.slots.n, 3);
    ck_assert_uint_eq(id.slots.worker[0], 5);
    ck_assert_uint_eq(id.slots.worker[2], 7);
    ck_assert_uint_eq(id.slots.handoff_ms, 0); /* no file: no floor */
    ck_assert_uint_eq(id.slots.fence_ms, SF_IDENTITY_NO_FENCE);
    ck_assert_uint_eq(sf_identity_fence_ms(&id), SF_IDENTITY_NO_FENCE);
    ck_assert_int_eq(access(path, F_OK), -1); /* claiming writes nothing */
    sf_identity_metrics(&id, &p);
    mem[p.len < sizeof mem ? p.len : sizeof mem - 1] = '\0';
    ck_assert_msg(strstr(mem, "snowflaked_identity_info{backend=\"static\",datacenter=\"2\","
                              "workers=\"5..7\"} 1") != NULL,
                  "%s", mem);
    sf_identity_renewal r;
    ck_assert_int_eq(sf_identity_renew(&id, T0 + 1234, &r, err, sizeof err), 0);
    ck_assert_uint_eq(r.stored_end_ms, T0 + 1234);
    ck_assert_uint_eq(r.fence_ms, SF_IDENTITY_NO_FENCE);
    ck_assert(!r.lost);
    uint64_t end;
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    ck_assert_uint_eq(end, T0 + 1234);
    ck_assert_int_eq(sf_identity_release(&id, T0 + 1000, err, sizeof err), 0);
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    ck_assert_uint_eq(end, T0 + 1000); /* the exact final E, below the last renewal */
    sf_identity_free(&id);
    sf_identity_free(&id); /* zeroed: harmless */

    static_identity(&id, false); /* the next start: the floor is the final E */
    ck_assert_int_eq(sf_identity_claim(&id, 1, false, err, sizeof err), 0);
    ck_assert_uint_eq(id.slots.handoff_ms, T0 + 1000);
    sf_identity_free(&id);
}
END_TEST

START_TEST(test_static_corrupt_lease)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("snowflaked-lease 1 12345 deadbeef\n", f);
    fclose(f);
    sf_identity id;
    char err[512];
    static_identity(&id, false);
    ck_assert_int_eq(sf_identity_claim(&id, 1, false, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "corrupt lease file"));
    ck_assert_ptr_nonnull(strstr(err, "--ignore-corrupt-lease"));
    ck_assert(!id.claimed);
    sf_identity_free(&id);
    static_identity(&id, true);
    ck_assert_int_eq(sf_identity_claim(&id, 1, false, err, sizeof err), 0);
    ck_assert_uint_eq(id.slots.handoff_ms, T0 + 7000);
    sf_identity_free(&id);
}
END_TEST

START_TEST(test_static_bad_arguments)
{
    sf_identity id;
    char err[256];
    static_identity(&id, false);
    ck_assert_int_eq(sf_identity_claim(&id, 0, false, err, sizeof err), -1);
    ck_assert_int_eq(sf_identity_claim(&id, SF_IDENTITY_MAX_SLOTS + 1, false, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "1..256"));
    sf_identity_free(&id);
    char longp[5000];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    sf_identity_static_config c = {.lease_path = longp};
    ck_assert_int_eq(sf_identity_static_init(&id, &c, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "too long"));
    c.lease_path = "/nonexistent-dir-sf-ident/x/" SF_LEASE_FILE;
    ck_assert_int_eq(sf_identity_static_init(&id, &c, err, sizeof err), 0);
    ck_assert_int_eq(sf_identity_claim(&id, 1, false, err, sizeof err), 0);
    sf_identity_renewal r;
    ck_assert_int_eq(sf_identity_renew(&id, T0, &r, err, sizeof err), -1); /* unwritable */
    ck_assert_int_eq(sf_identity_release(&id, T0, err, sizeof err), -1);
    sf_identity_free(&id);
}
END_TEST

/* ---- a scripted backend: what the checks and the keeper do with other answers -------------- */

typedef struct scripted {
    bool duplicate, lost;
    bool lapse;         /* the next renewal says lapsed */
    unsigned taken;     /* claims that find every slot held before one succeeds */
    uint64_t claim_handoff_ms;
    int reclaim_result; /* 0 reclaimed, 1 taken (lost), -1 error */
    uint64_t handoff_ms;
    uint64_t fence_ms;
    unsigned renewals, reclaims;
    uint64_t released;
} scripted;

static int scripted_claim(void *b, unsigned n, bool once, sf_identity_slots *out, char *err,
                          size_t errlen)
{
    scripted *s = b;
    (void)once;
    if (s->taken) {
        s->taken--;
        snprintf(err, errlen, "all held");
        return SF_IDENTITY_TAKEN;
    }
    out->handoff_ms = s->claim_handoff_ms;
    for (unsigned i = 0; i < n; i++)
        out->worker[i] = s->duplicate ? 1 : i;
    out->n = n;
    return 0;
}

static int scripted_renew(void *b, uint64_t want, sf_identity_renewal *out, char *err,
                          size_t errlen)
{
    scripted *s = b;
    (void)err;
    (void)errlen;
    s->renewals++;
    *out = (sf_identity_renewal){.stored_end_ms = want, .fence_ms = s->fence_ms, .lost = s->lost,
                                 .lapsed = s->lapse};
    s->lapse = false;
    return 0;
}

static int scripted_reclaim(void *b, uint64_t want, sf_identity_renewal *out, char *err,
                            size_t errlen)
{
    scripted *s = b;
    s->reclaims++;
    if (s->reclaim_result < 0) {
        snprintf(err, errlen, "etcd unreachable");
        return -1;
    }
    s->lost = s->reclaim_result == 1; /* from now on every renewal says so, as etcd's does */
    uint64_t stored = want > s->handoff_ms ? want : s->handoff_ms;
    *out = (sf_identity_renewal){.stored_end_ms = stored,
                                 .fence_ms = s->fence_ms,
                                 .reclaimed = s->reclaim_result == 0,
                                 .lost = s->reclaim_result == 1,
                                 .handoff_ms = s->handoff_ms};
    return 0;
}

static int scripted_release(void *b, uint64_t end, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    ((scripted *)b)->released = end;
    return 0;
}

static const sf_identity_ops scripted_ops = {
    .name = "scripted",
    .claim = scripted_claim,
    .renew = scripted_renew,
    .reclaim = scripted_reclaim,
    .release = scripted_release,
};

typedef struct hook_log {
    sf_gen *g;
    unsigned stops, resumes, losses;
    uint64_t resumed_from;
} hook_log;

static int hook_bind(void *arg, const sf_identity_slots *sl)
{
    hook_log *h = arg;
    char err[128];
    return sf_gen_bind(h->g, sl->datacenter, sl->worker[0],
                       sf_lease_first_tick(&h->g->layout, sl->handoff_ms), err, sizeof err);
}

static void hook_stop(void *arg)
{
    hook_log *h = arg;
    h->stops++;
    sf_gen_cap_lease(h->g, 0);
}

static int hook_resume(void *arg, uint64_t handoff_ms)
{
    hook_log *h = arg;
    char err[128];
    h->resumes++;
    h->resumed_from = handoff_ms;
    return sf_gen_resume(h->g, sf_lease_first_tick(&h->g->layout, handoff_ms), err, sizeof err);
}

static void hook_lost(void *arg)
{
    ((hook_log *)arg)->losses++;
}

START_TEST(test_claim_checks_the_backend)
{
    scripted s = {.duplicate = true};
    sf_identity id = {.ops = &scripted_ops, .backend = &s};
    char err[256];
    ck_assert_int_eq(sf_identity_claim(&id, 1, false, err, sizeof err), 0); /* one: no duplicate */
    ck_assert_int_eq(sf_identity_claim(&id, 2, false, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "worker 1 claimed twice"));
    ck_assert_uint_eq(sf_identity_fence_ms(&id), SF_IDENTITY_NO_FENCE); /* no fence_ms op */
}
END_TEST

/* The keeper opens the generator up to min(E stored, fence), hands the exact final E to
 * release, and a lost slot opens nothing. */
START_TEST(test_keeper_through_identity)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_at(&g, &clk, 0);
    sf_gen *gens[] = {&g};
    scripted s = {.fence_ms = T0 + 3};
    sf_identity id = {.ops = &scripted_ops, .backend = &s};
    sf_lease_store store;
    sf_identity_lease_store(&id, &store);
    sf_lease_keeper k;
    char err[256];
    ck_assert_msg(sf_lease_keeper_start_store(&k, gens, 1, &store, 2000, 0, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_uint_eq(s.renewals, 1);
    ck_assert_uint_eq(k.end_ms, T0 + sf_gen_max_ahead_ms(&g) + 2000); /* E as the file's */
    uint64_t id1;
    ck_assert_int_eq(sf_gen_next(&g, &id1), SF_OK);
    clk_fake_set(&clk, T0 + 3); /* the fence: tick T0+3 is not open, E would allow it */
    ck_assert_int_eq(sf_gen_next(&g, &id1), SF_ELEASE);
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0);
    ck_assert_uint_eq(s.released, T0 + 1); /* the tick after the only ID */
    sf_gen_destroy(&g);

    gen_at(&g, &clk, 0);
    s = (scripted){.fence_ms = SF_IDENTITY_NO_FENCE, .lost = true};
    ck_assert_int_eq(sf_lease_keeper_start_store(&k, gens, 1, &store, 2000, 0, err, sizeof err),
                     -1);
    ck_assert_ptr_nonnull(strstr(err, "someone else's"));
    ck_assert_int_eq(sf_gen_next(&g, &id1), SF_ELEASE);
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0); /* never started: harmless */
    sf_gen_destroy(&g);
}
END_TEST

/* A lapse through the keeper's store: the generators stop before reclaim is asked; a failed
 * reclaim keeps them stopped and is asked again next time; the same slots back resume them from
 * the handoff E (stored E never below it); slots taken meanwhile call lost once. */
START_TEST(test_lapse_reclaim_resume)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_at(&g, &clk, 0);
    scripted s = {.fence_ms = SF_IDENTITY_NO_FENCE};
    hook_log h = {.g = &g};
    sf_identity id = {.ops = &scripted_ops, .backend = &s};
    id.hooks = (sf_identity_hooks){
        .stop_issuing = hook_stop, .resume = hook_resume, .lost = hook_lost, .arg = &h};
    sf_lease_store store;
    sf_identity_lease_store(&id, &store);
    sf_lease_renewal r;
    char err[256];
    ck_assert_int_eq(store.persist(store.ctx, T0 + 1000, &r, err, sizeof err), 0);
    sf_gen_extend_lease(&g, sf_lease_first_tick(&g.layout, r.open_until_ms));
    uint64_t before, after;
    ck_assert_int_eq(sf_gen_next(&g, &before), SF_OK);

    s.lapse = true;
    s.reclaim_result = -1; /* etcd away: stopped, not resumed, asked again */
    ck_assert_int_eq(store.persist(store.ctx, T0 + 1000, &r, err, sizeof err), -1);
    ck_assert_uint_eq(h.stops, 1);
    ck_assert_uint_eq(s.reclaims, 1);
    ck_assert_int_eq(sf_gen_next(&g, &after), SF_ELEASE);

    s.lapse = true; /* still lapsed (the backend says so until reclaimed) */
    s.reclaim_result = 0;
    s.handoff_ms = T0 + 50; /* a holder in between went up to here */
    ck_assert_int_eq(store.persist(store.ctx, T0 + 20, &r, err, sizeof err), 0);
    ck_assert_uint_eq(h.resumes, 1);
    ck_assert_uint_eq(h.resumed_from, T0 + 50);
    ck_assert_uint_ge(r.stored_end_ms, T0 + 50);
    sf_gen_extend_lease(&g, sf_lease_first_tick(&g.layout, T0 + 1000));
    clk_fake_set(&clk, T0 + 50);
    ck_assert_int_eq(sf_gen_next(&g, &after), SF_OK);
    ck_assert_uint_gt(after, before);
    ck_assert_uint_ge((after >> 22) + g.layout.epoch_ms, T0 + 50);

    s.lapse = true;
    s.reclaim_result = 1; /* taken meanwhile */
    ck_assert_int_eq(store.persist(store.ctx, T0 + 1000, &r, err, sizeof err), -1);
    ck_assert_uint_eq(h.losses, 1);
    ck_assert_int_eq(sf_gen_next(&g, &after), SF_ELEASE);
    ck_assert_int_eq(store.persist(store.ctx, T0 + 1000, &r, err, sizeof err), -1);
    ck_assert_uint_eq(h.losses, 1); /* once */
    sf_gen_destroy(&g);
}
END_TEST

/* Waiting for a slot: the store answers "not yet" (no failure counted, nothing opened) until a
 * claim works, then binds the generators to the slot and floor, and stores E >= that floor. */
START_TEST(test_claim_later_through_the_keeper)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_at(&g, &clk, 0);
    sf_gen *gens[] = {&g};
    scripted s = {.fence_ms = SF_IDENTITY_NO_FENCE, .taken = 2, .claim_handoff_ms = T0 + 5000};
    hook_log h = {.g = &g};
    sf_identity id = {.ops = &scripted_ops, .backend = &s};
    id.hooks = (sf_identity_hooks){.bind = hook_bind, .arg = &h};
    id.wait_for_slot = true;
    char err[256];
    ck_assert_int_eq(sf_identity_claim(&id, 1, false, err, sizeof err), SF_IDENTITY_TAKEN);
    ck_assert(!sf_identity_claimed(&id));
    sf_identity_claim_later(&id, 1);
    sf_lease_store store;
    sf_identity_lease_store(&id, &store);
    sf_lease_keeper k;
    ck_assert_msg(sf_lease_keeper_start_store(&k, gens, 1, &store, 2000, 0, err, sizeof err) == 0,
                  "%s", err); /* "not yet" is not a failure */
    ck_assert_uint_eq(s.renewals, 0);
    ck_assert_uint_eq(counter_get(&k.failures), 0);
    uint64_t x;
    ck_assert_int_eq(sf_gen_next(&g, &x), SF_ELEASE);
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0);
    sf_gen_destroy(&g);

    gen_at(&g, &clk, 0); /* the second try finds a slot */
    ck_assert_msg(sf_lease_keeper_start_store(&k, gens, 1, &store, 2000, 0, err, sizeof err) == 0,
                  "%s", err);
    ck_assert(sf_identity_claimed(&id));
    ck_assert_uint_eq(s.renewals, 1);
    ck_assert_uint_ge(k.end_ms, T0 + 5000); /* never below the previous holders' E */
    ck_assert_int_eq(sf_gen_next(&g, &x), SF_ECLOCK); /* the clock is 5 s behind that E */
    clk_fake_set(&clk, T0 + 5000); /* E is exactly the floor: the next renewal (500 ms) */
    int rc = SF_ELEASE;
    for (int i = 0; i < 300 && (rc = sf_gen_next(&g, &x)) == SF_ELEASE; i++)
        usleep(10000);
    ck_assert_int_eq(rc, SF_OK);
    ck_assert_uint_ge((x >> 22) + g.layout.epoch_ms, T0 + 5000);
    ck_assert_uint_eq(worker_of_id(x), 0);
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0);
    sf_gen_destroy(&g);
}
END_TEST

/* The keeper over the static backend writes the very file the path-based keeper writes. */
START_TEST(test_keeper_static_same_file)
{
    clk_fake clk;
    clk_fake_init(&clk, T0, 0, 0);
    sf_gen g;
    gen_at(&g, &clk, 0);
    sf_gen *gens[] = {&g};
    sf_identity id;
    static_identity(&id, false);
    char err[256];
    ck_assert_int_eq(sf_identity_claim(&id, 1, false, err, sizeof err), 0);
    sf_lease_store store;
    sf_identity_lease_store(&id, &store);
    sf_lease_keeper k;
    ck_assert_int_eq(sf_lease_keeper_start_store(&k, gens, 1, &store, 2000, 0, err, sizeof err), 0);
    uint64_t end;
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    ck_assert_uint_eq(end, T0 + sf_gen_max_ahead_ms(&g) + 2000);
    uint64_t one;
    ck_assert_int_eq(sf_gen_next(&g, &one), SF_OK);
    ck_assert_int_eq(sf_lease_keeper_stop(&k, err, sizeof err), 0);
    ck_assert_int_eq(sf_lease_read(path, &end, err, sizeof err), 1);
    ck_assert_uint_eq(end, T0 + 1);
    sf_gen_destroy(&g);
    sf_identity_free(&id);
}
END_TEST

static Suite *identity_suite(void)
{
    Suite *s = suite_create("identity");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_static_claim_first_start);
    tcase_add_test(tc, test_static_corrupt_lease);
    tcase_add_test(tc, test_static_bad_arguments);
    tcase_add_test(tc, test_claim_checks_the_backend);
    tcase_add_test(tc, test_keeper_through_identity);
    tcase_add_test(tc, test_lapse_reclaim_resume);
    tcase_add_test(tc, test_claim_later_through_the_keeper);
    tcase_add_test(tc, test_keeper_static_same_file);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return sf_run_suite(identity_suite());
}

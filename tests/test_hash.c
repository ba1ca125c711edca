/*
 * test_hash.c: the canonical hash. Property tests over ~200 random valid
 * modules (DAGs of elementwise, matmul, softmax, dropout and transpose ops
 * with compatible shapes, on a device or on a mesh, from a fixed seed): the
 * hash ignores value and mesh names but not the order of ops, and
 * changes under every single mutation that changes meaning (a dimension, a
 * dtype, an attribute, a device, an edge, a dead op, a placement, mesh
 * content, an op kind). Then fixed cases: pmap device-variable names,
 * function names and order, pmaps calling a function (the same hash as
 * owning copies of its body), constants and initializers, and a known
 * answer.
 *
 * A random module is described abstractly first (a `dag`), then built by
 * build() with options that choose the op order, the names and one mutation,
 * so that two builds differ in exactly what a test means them to.
 */
/* cmocka needs these first, in this order. */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
/* clang-format on */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "ir/pb.h"
#include "support/support.h"

/* ---- a small deterministic generator ---- */

static uint64_t rng_state;

static uint32_t
rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)((rng_state >> 33) % n);
}

/* ---- abstract modules ---- */

enum { MAXSYM = 6, MAXARG = 24, MAXNODE = 48, MAXRES = 4 };

/* A value reference: a node index >= 0, or argument -(ref + 1). */
typedef int ref;

typedef struct node {
    int kind;
    int nin;
    ref in[2];
    int sa, sb;   /* result shape: sizes of symbols sa and sb */
    int64_t attr; /* Softmax axis, Dropout ratio in tenths */
} node;

typedef struct arg {
    int sa, sb;
    int64_t place; /* mesh modules: placement on the mesh's one axis */
} arg;

typedef struct dag {
    int on_mesh;
    int nsym;
    int64_t size[MAXSYM];
    int narg;
    arg args[MAXARG];
    int nnode;
    node nodes[MAXNODE];
    int nres;
    ref res[MAXRES];
} dag;

static void
shape_of(const dag *g, ref r, int *sa, int *sb)
{
    if (r >= 0) {
        *sa = g->nodes[r].sa;
        *sb = g->nodes[r].sb;
    } else {
        *sa = g->args[-r - 1].sa;
        *sb = g->args[-r - 1].sb;
    }
}

static ref
add_arg(dag *g, int sa, int sb)
{
    static const int64_t places[3] = {IR_PLACE_R, 0, 1};
    arg *a = &g->args[g->narg];
    a->sa = sa;
    a->sb = sb;
    a->place = g->on_mesh ? places[rnd(3)] : IR_PLACE_R;
    return -(++g->narg);
}

/* A random existing value. */
static ref
pick(const dag *g)
{
    uint32_t i = rnd((uint32_t)(g->narg + g->nnode));
    return i < (uint32_t)g->narg ? -(int)i - 1 : (int)i - g->narg;
}

/* A random value of shape (sa, sb) other than avoid if one exists, else a new argument. */
static ref
pick_shaped(dag *g, int sa, int sb, ref avoid)
{
    ref cand[MAXARG + MAXNODE];
    int n = 0;
    for (int i = 0; i < g->narg + g->nnode; i++) {
        ref r = i < g->narg ? -i - 1 : i - g->narg;
        int a, b;
        shape_of(g, r, &a, &b);
        if (a == sa && b == sb && r != avoid)
            cand[n++] = r;
    }
    if (n == 0 || (g->narg < MAXARG && rnd(4) == 0))
        return add_arg(g, sa, sb);
    return cand[rnd((uint32_t)n)];
}

static void
add_node(dag *g, int kind, int nin, ref a, ref b, int sa, int sb, int64_t attr)
{
    node *n = &g->nodes[g->nnode++];
    n->kind = kind;
    n->nin = nin;
    n->in[0] = a;
    n->in[1] = b;
    n->sa = sa;
    n->sb = sb;
    n->attr = attr;
}

/*
 * A random DAG. Every module has at least one Softmax (an int attribute), one
 * Dropout (a float attribute) and one Sub of two different values (for the
 * edge-swap mutation); sizes are even so that any dimension splits over the
 * two devices of the mesh.
 */
static void
gen_dag(dag *g, int on_mesh)
{
    static const int64_t sizes[4] = {2, 4, 6, 8};
    int want = 4 + (int)rnd(20), have_sm = 0, have_do = 0, have_sub = 0;
    memset(g, 0, sizeof *g);
    g->on_mesh = on_mesh;
    g->nsym = 3 + (int)rnd(MAXSYM - 2);
    for (int s = 0; s < g->nsym; s++)
        g->size[s] = sizes[rnd(4)];
    for (int i = 0, n = 2 + (int)rnd(3); i < n; i++)
        add_arg(g, (int)rnd((uint32_t)g->nsym), (int)rnd((uint32_t)g->nsym));
    while (g->nnode < want && g->narg < MAXARG - 2) {
        ref x = pick(g), y;
        int sa, sb, c;
        shape_of(g, x, &sa, &sb);
        switch (rnd(9)) {
        case 0:
            add_node(g, IR_OP_RELU, 1, x, 0, sa, sb, 0);
            break;
        case 1:
            add_node(g, rnd(2) ? IR_OP_TANH : IR_OP_SIGMOID, 1, x, 0, sa, sb, 0);
            break;
        case 2:
            add_node(g, rnd(2) ? IR_OP_ADD : IR_OP_MUL, 2, x, pick_shaped(g, sa, sb, 1 << 30), sa,
                     sb, 0);
            break;
        case 3:
            y = pick_shaped(g, sa, sb, x);
            add_node(g, rnd(2) ? IR_OP_SUB : IR_OP_DIV, 2, x, y, sa, sb, 0);
            have_sub |= g->nodes[g->nnode - 1].kind == IR_OP_SUB;
            break;
        case 4:
        case 5:
            c = (int)rnd((uint32_t)g->nsym);
            y = pick_shaped(g, sb, c, 1 << 30);
            add_node(g, IR_OP_MATMUL, 2, x, y, sa, c, 0);
            break;
        case 6:
            add_node(g, IR_OP_SOFTMAX, 1, x, 0, sa, sb, rnd(2));
            have_sm = 1;
            break;
        case 7:
            add_node(g, IR_OP_DROPOUT, 1, x, 0, sa, sb, 1 + rnd(8));
            have_do = 1;
            break;
        default:
            add_node(g, IR_OP_TRANSPOSE, 1, x, 0, sb, sa, 0);
            break;
        }
    }
    for (int k = 0; k < 3; k++) {
        ref x = pick(g);
        int sa, sb;
        shape_of(g, x, &sa, &sb);
        if (k == 0 && !have_sm)
            add_node(g, IR_OP_SOFTMAX, 1, x, 0, sa, sb, 1);
        if (k == 1 && !have_do)
            add_node(g, IR_OP_DROPOUT, 1, x, 0, sa, sb, 5);
        if (k == 2 && !have_sub)
            add_node(g, IR_OP_SUB, 2, x, add_arg(g, sa, sb), sa, sb, 0);
    }
    g->res[g->nres++] = g->nnode - 1;
    for (int i = 0, n = (int)rnd(3); i < n; i++)
        g->res[g->nres++] = pick(g);
}

/* ---- building modules ---- */

typedef enum mutation {
    MUT_NONE,
    MUT_DIM,       /* the size of one symbol that an argument uses, everywhere */
    MUT_DTYPE,     /* every tensor f32 -> f64 */
    MUT_ATTR,      /* one attribute value */
    MUT_ATTR_KEY,  /* one optional attribute dropped */
    MUT_DEVICE,    /* device modules: every tensor on device 3 instead of 0 */
    MUT_SWAP,      /* the two inputs of a Sub swapped */
    MUT_EDGE,      /* one input fed by another argument of the same shape */
    MUT_KIND,      /* one op's kind (Add <-> Mul, Relu -> Identity, ...) */
    MUT_DEAD,      /* one more op whose result nobody uses */
    MUT_PLACEMENT, /* mesh modules: one argument's placement */
    MUT_MESH,      /* mesh modules: the mesh's devices */
    NMUT
} mutation;

static const char *const mutation_names[NMUT] = {"none",     "dim",    "dtype",     "attr",
                                                 "attr-key", "device", "swap",      "edge",
                                                 "kind",     "dead",   "placement", "mesh"};

typedef struct options {
    int order[MAXNODE]; /* a topological order of the nodes */
    int names;          /* 0 "vN", 1 other names, 2 no names */
    mutation mut;
    int target; /* which node, symbol or argument the mutation picks */
} options;

typedef struct built {
    ir_module *m;
    ir_id vals_arg[MAXARG];
    ir_id vals_node[MAXNODE];
} built;

static ir_id
value_of(const built *b, ref r)
{
    return r >= 0 ? b->vals_node[r] : b->vals_arg[-r - 1];
}

static ir_id
make_type(ir_module *m, const dag *g, const options *o, ir_id mesh, int sa, int sb, int64_t place)
{
    int64_t dims[2] = {g->size[sa], g->size[sb]};
    ir_dtype dt = o->mut == MUT_DTYPE ? IR_F64 : IR_F32;
    if (o->mut == MUT_DIM && sa == o->target)
        dims[0] += 2;
    if (o->mut == MUT_DIM && sb == o->target)
        dims[1] += 2;
    if (mesh != 0)
        return ir_type_dtensor(m, dt, 2, dims, mesh, &place);
    return ir_type_tensor(m, dt, 2, dims, o->mut == MUT_DEVICE ? 3 : 0);
}

static void
name_of(const options *o, const char *kind, int i, char *buf, size_t n)
{
    if (o->names == 0)
        snprintf(buf, n, "%s%d", kind, i);
    else if (o->names == 1)
        snprintf(buf, n, "renamed_%s_%d", kind, 97 - i);
    else
        buf[0] = '\0';
}

static void
build(const dag *g, const options *o, built *b)
{
    ir_module *m = ir_module_new();
    ir_id mesh = 0, f;
    char name[64];
    memset(b, 0, sizeof *b);
    b->m = m;
    if (g->on_mesh) {
        int64_t shape[1] = {2}, devs[2] = {0, o->mut == MUT_MESH ? 5 : 1};
        mesh = ir_mesh_add(m, o->names == 1 ? "other_mesh" : "mesh", 1, shape, devs);
    }
    f = ir_func_new(m, "main");
    for (int i = 0; i < g->narg; i++) {
        int64_t place = g->args[i].place;
        if (o->mut == MUT_PLACEMENT && i == o->target)
            place = place == IR_PLACE_R ? 0 : place == 0 ? 1 : IR_PLACE_R;
        name_of(o, "arg", i, name, sizeof name);
        b->vals_arg[i] = ir_region_add_arg(
            m, f, make_type(m, g, o, mesh, g->args[i].sa, g->args[i].sb, place), name);
    }
    for (int k = 0; k < g->nnode; k++) {
        int i = o->order[k];
        const node *nd = &g->nodes[i];
        int kind = nd->kind;
        ir_id in[2], ty, op;
        const char *np = name;
        for (int j = 0; j < nd->nin; j++)
            in[j] = value_of(b, nd->in[j]);
        if (o->mut == MUT_SWAP && i == o->target) {
            ir_id t = in[0];
            in[0] = in[1];
            in[1] = t;
        }
        if (o->mut == MUT_KIND && i == o->target) {
            switch (kind) {
            case IR_OP_ADD:
                kind = IR_OP_MUL;
                break;
            case IR_OP_MUL:
                kind = IR_OP_ADD;
                break;
            case IR_OP_SUB:
                kind = IR_OP_DIV;
                break;
            case IR_OP_DIV:
                kind = IR_OP_SUB;
                break;
            case IR_OP_TANH:
                kind = IR_OP_SIGMOID;
                break;
            default:
                kind = IR_OP_IDENTITY;
                break;
            }
        }
        ty = make_type(m, g, o, mesh, nd->sa, nd->sb, IR_PLACE_R);
        name_of(o, "v", i, name, sizeof name);
        op = ir_op_add(m, f, kind, (uint32_t)nd->nin, in, 1, &ty, &np);
        if (nd->kind == IR_OP_SOFTMAX && !(o->mut == MUT_ATTR_KEY && i == o->target))
            ir_op_set_int(m, op, "axis",
                          o->mut == MUT_ATTR && i == o->target ? 1 - nd->attr : nd->attr);
        if (nd->kind == IR_OP_DROPOUT && !(o->mut == MUT_ATTR_KEY && i == o->target))
            ir_op_set_float(
                m, op, "ratio",
                (double)(o->mut == MUT_ATTR && i == o->target ? nd->attr + 1 : nd->attr) / 10.0);
        if (nd->kind == IR_OP_TRANSPOSE) {
            int64_t perm[2] = {1, 0};
            ir_op_set_ints(m, op, "perm", 2, perm);
        }
        b->vals_node[i] = ir_op_output(m, op, 0);
    }
    if (o->mut == MUT_DEAD) {
        ir_id x = value_of(b, g->res[0]);
        ir_id ty = m->values[x].type;
        const char *np = "dead";
        ir_op_add(m, f, IR_OP_RELU, 1, &x, 1, &ty, &np);
    }
    for (int i = 0; i < g->nres; i++)
        ir_region_add_result(m, f, value_of(b, g->res[i]));
}

/* A random topological order of g's nodes (Kahn's algorithm, random choice). */
static void
random_order(const dag *g, int *order)
{
    int indeg[MAXNODE], ready[MAXNODE], nready = 0, n = 0;
    for (int i = 0; i < g->nnode; i++) {
        indeg[i] = 0;
        for (int j = 0; j < g->nodes[i].nin; j++)
            indeg[i] += g->nodes[i].in[j] >= 0;
    }
    for (int i = 0; i < g->nnode; i++)
        if (indeg[i] == 0)
            ready[nready++] = i;
    while (nready > 0) {
        int k = (int)rnd((uint32_t)nready), i = ready[k];
        ready[k] = ready[--nready];
        order[n++] = i;
        for (int c = 0; c < g->nnode; c++)
            for (int j = 0; j < g->nodes[c].nin; j++)
                if (g->nodes[c].in[j] == i && --indeg[c] == 0)
                    ready[nready++] = c;
    }
    assert_int_equal(n, g->nnode);
}

static void
identity_order(const dag *g, int *order)
{
    for (int i = 0; i < g->nnode; i++)
        order[i] = i;
}

static void
hash_of(const dag *g, const options *o, di_hash *h, int check_valid)
{
    built b;
    build(g, o, &b);
    if (check_valid) {
        di_error err;
        if (ir_verify(b.m, &err) != 0)
            fail_msg("generated module does not verify: %s", err.msg);
    }
    ir_hash(b.m, h);
    ir_module_free(b.m);
}

static int
same(const di_hash *a, const di_hash *b)
{
    return memcmp(a->b, b->b, sizeof a->b) == 0;
}

/* ---- the property tests ---- */

enum { NMODULES = 200 };

/* Names of values and meshes do not matter. */
static void
test_rename(void **state)
{
    (void)state;
    rng_state = 1;
    for (int n = 0; n < NMODULES; n++) {
        dag g;
        options o;
        di_hash a, b, c;
        gen_dag(&g, n % 2);
        memset(&o, 0, sizeof o);
        identity_order(&g, o.order);
        hash_of(&g, &o, &a, 1);
        o.names = 1;
        hash_of(&g, &o, &b, 1);
        o.names = 2;
        hash_of(&g, &o, &c, 1);
        assert_true(same(&a, &b));
        assert_true(same(&a, &c));
    }
}

/*
 * The order of ops matters, even between independent ones (the simulator
 * runs a device's ops in program order): another topological order hashes
 * differently, the same order under other names the same.
 */
static void
test_reorder(void **state)
{
    int reordered = 0;
    (void)state;
    rng_state = 2;
    for (int n = 0; n < NMODULES; n++) {
        dag g;
        options o;
        di_hash a, b;
        int moved = 0;
        gen_dag(&g, n % 2);
        memset(&o, 0, sizeof o);
        identity_order(&g, o.order);
        hash_of(&g, &o, &a, 0);
        random_order(&g, o.order);
        for (int i = 0; i < g.nnode; i++)
            moved |= o.order[i] != i;
        o.names = (int)rnd(3);
        hash_of(&g, &o, &b, 1);
        assert_int_equal(same(&a, &b), !moved);
        reordered += moved;
    }
    assert_true(reordered > NMODULES / 2);
}

/*
 * Do refs a and b compute the same thing (the same argument, or the same op
 * on the same inputs)? Such values are interchangeable and hash the same.
 */
static int
same_value(const dag *g, ref a, ref b)
{
    const node *x, *y;
    if (a == b)
        return 1;
    if (a < 0 || b < 0)
        return 0;
    x = &g->nodes[a];
    y = &g->nodes[b];
    if (x->kind != y->kind || x->nin != y->nin || x->attr != y->attr || x->sa != y->sa ||
        x->sb != y->sb)
        return 0;
    for (int j = 0; j < x->nin; j++)
        if (!same_value(g, x->in[j], y->in[j]))
            return 0;
    return 1;
}

/* Printing and parsing, and encoding and decoding, keep the hash. */
static void
test_round_trips(void **state)
{
    ir_limits lim;
    (void)state;
    ir_limits_default(&lim);
    rng_state = 4;
    for (int n = 0; n < NMODULES; n++) {
        dag g;
        options o;
        built b;
        di_hash h0, h1, h2;
        ir_module *t = NULL, *p = NULL;
        di_error err;
        char *text;
        size_t len;
        uint8_t *bytes;
        gen_dag(&g, n % 2);
        memset(&o, 0, sizeof o);
        random_order(&g, o.order);
        o.names = (int)rnd(3);
        build(&g, &o, &b);
        ir_hash(b.m, &h0);

        text = ir_print(b.m, &len);
        if (ir_parse(text, len, &t, &err) != 0)
            fail_msg("module %d: parse(print(m)): %s\n%s", n, err.msg, text);
        ir_hash(t, &h1);
        if (!same(&h0, &h1))
            fail_msg("module %d: parse(print(m)) hashes differently:\n%s", n, text);

        assert_int_equal(ir_encode(b.m, &bytes, &len), 0);
        if (ir_decode(bytes, len, &lim, &p, &err) != 0)
            fail_msg("module %d: decode(encode(m)): %s", n, err.msg);
        ir_hash(p, &h2);
        assert_true(same(&h0, &h2));

        di_free(text);
        di_free(bytes);
        ir_module_free(t);
        ir_module_free(p);
        ir_module_free(b.m);
    }
}

/* Picks a target for mutation mu in g, or returns 0 when it does not apply. */
static int
choose_target(const dag *g, mutation mu, int *target)
{
    int cand[MAXNODE + MAXARG], n = 0;
    switch (mu) {
    case MUT_DIM: {
        int used[MAXSYM] = {0};
        for (int i = 0; i < g->narg; i++)
            used[g->args[i].sa] = used[g->args[i].sb] = 1;
        for (int s = 0; s < g->nsym; s++)
            if (used[s])
                cand[n++] = s;
        break;
    }
    case MUT_ATTR:
    case MUT_ATTR_KEY:
        for (int i = 0; i < g->nnode; i++)
            if (g->nodes[i].kind == IR_OP_SOFTMAX || g->nodes[i].kind == IR_OP_DROPOUT)
                cand[n++] = i;
        break;
    case MUT_SWAP:
        for (int i = 0; i < g->nnode; i++)
            if ((g->nodes[i].kind == IR_OP_SUB || g->nodes[i].kind == IR_OP_DIV) &&
                !same_value(g, g->nodes[i].in[0], g->nodes[i].in[1]))
                cand[n++] = i;
        break;
    case MUT_KIND:
        for (int i = 0; i < g->nnode; i++)
            cand[n++] = i;
        break;
    case MUT_DEVICE:
        return !g->on_mesh;
    case MUT_PLACEMENT:
        if (!g->on_mesh)
            return 0;
        for (int i = 0; i < g->narg; i++)
            cand[n++] = i;
        break;
    case MUT_MESH:
        return g->on_mesh;
    default:
        return 1;
    }
    if (n == 0)
        return 0;
    *target = cand[rnd((uint32_t)n)];
    return 1;
}

/*
 * Edge change: input 0 of a binary node now comes from a different argument
 * of the same shape. (Not from any value: two ops computing the same thing
 * from the same inputs are interchangeable, and rightly hash the same.)
 */
static int
mutate_edge(dag *g)
{
    for (int tries = 0; tries < 20; tries++) {
        int i = (int)rnd((uint32_t)g->nnode), sa, sb;
        node *nd = &g->nodes[i];
        ref cand[MAXARG + MAXNODE];
        int n = 0;
        if (nd->nin != 2)
            continue;
        shape_of(g, nd->in[0], &sa, &sb);
        for (int k = 0; k < g->narg; k++) {
            ref r = -k - 1;
            int a, b;
            shape_of(g, r, &a, &b);
            if (a == sa && b == sb && r != nd->in[0])
                cand[n++] = r;
        }
        if (n == 0)
            continue;
        nd->in[0] = cand[rnd((uint32_t)n)];
        return 1;
    }
    return 0;
}

/* Every single mutation changes the hash, and the mutated module still verifies. */
static void
test_mutations(void **state)
{
    int applied[NMUT] = {0};
    (void)state;
    rng_state = 3;
    for (int n = 0; n < NMODULES; n++) {
        dag g;
        options o;
        di_hash base, h;
        gen_dag(&g, n % 2);
        memset(&o, 0, sizeof o);
        identity_order(&g, o.order);
        hash_of(&g, &o, &base, 1);
        for (int mu = MUT_DIM; mu < NMUT; mu++) {
            options p = o;
            dag g2 = g;
            if (mu == MUT_EDGE) {
                if (!mutate_edge(&g2))
                    continue;
                hash_of(&g2, &o, &h, 1);
            } else {
                if (!choose_target(&g, (mutation)mu, &p.target))
                    continue;
                p.mut = (mutation)mu;
                /* An Identity in place of a Softmax or Dropout would keep their attributes. */
                if (mu == MUT_KIND && (g.nodes[p.target].kind == IR_OP_SOFTMAX ||
                                       g.nodes[p.target].kind == IR_OP_DROPOUT ||
                                       g.nodes[p.target].kind == IR_OP_TRANSPOSE ||
                                       g.nodes[p.target].kind == IR_OP_MATMUL))
                    continue;
                /* Renaming and reordering on top must not hide the change. */
                random_order(&g, p.order);
                p.names = (int)rnd(3);
                hash_of(&g, &p, &h, 1);
            }
            if (same(&base, &h))
                fail_msg("module %d: mutation %s (target %d) kept the hash", n, mutation_names[mu],
                         p.target);
            applied[mu]++;
        }
    }
    for (int mu = MUT_DIM; mu < NMUT; mu++) {
        print_message("mutation %-9s applied to %d modules\n", mutation_names[mu], applied[mu]);
        assert_true(applied[mu] >= NMODULES / 4);
    }
}

/*
 * main(xs: tuple over devices 1, 2) = pmap(d) { Relu } with device variable
 * var; devices[1] is dev1.
 */
static ir_module *
pmap_module(const char *var, int64_t dev1)
{
    ir_module *m = ir_module_new();
    int64_t devs[2] = {1, dev1}, d[2] = {4, 4};
    ir_id f = ir_func_new(m, "main"), body = ir_body_new(m), dv = ir_str(m, var);
    ir_id e[2] = {t2(m, 4, 4, 1), t2(m, 4, 4, (int32_t)dev1)}, tt = ir_type_tuple(m, 2, e);
    ir_id xs = ir_region_add_arg(m, f, tt, "xs");
    ir_id local = ir_type_tensor_var(m, IR_F32, 2, d, dv);
    ir_id xi = ir_region_add_arg(m, body, local, "xi");
    ir_id r = ir_op_add(m, body, IR_OP_RELU, 1, &xi, 1, &local, NULL);
    ir_id p;
    ir_region_add_result(m, body, ir_op_output(m, r, 0));
    p = ir_op_add(m, f, IR_OP_PMAP, 1, &xs, 1, &tt, NULL);
    ir_op_set_string(m, p, "device_var", var);
    ir_op_set_ints(m, p, "devices", 2, devs);
    m->ops[p].body = body;
    m->regions[body].parent = p;
    ir_region_add_result(m, f, ir_op_output(m, p, 0));
    return m;
}

static void
module_hash(ir_module *m, di_hash *h, int free_it)
{
    di_error err;
    if (ir_verify(m, &err) != 0)
        fail_msg("module does not verify: %s", err.msg);
    ir_hash(m, h);
    if (free_it)
        ir_module_free(m);
}

static void
test_pmap_devvar(void **state)
{
    di_hash a, b, c;
    (void)state;
    module_hash(pmap_module("d", 2), &a, 1);
    module_hash(pmap_module("shard", 2), &b, 1);
    module_hash(pmap_module("d", 3), &c, 1);
    assert_true(same(&a, &b));
    assert_false(same(&a, &c));
}

static void relu_func(ir_module *m, const char *name, int64_t n);

/*
 * main(xs) = pmap(Relu) twice over devices 1, 2: each pmap with its own
 * body (callee NULL) or both calling one function `callee`, defined after
 * @main (or before it with `first`); `kind` is the op of the first call.
 */
static ir_module *
calls_module(const char *callee, int first, int kind)
{
    ir_module *m = ir_module_new();
    int64_t devs[2] = {1, 2}, d[2] = {4, 4};
    ir_id e[2], tt, local, xs, v, fn = 0, f;
    if (callee && first)
        fn = ir_func_new(m, callee);
    f = ir_func_new(m, "main");
    if (callee && !first)
        fn = ir_func_new(m, callee);
    e[0] = t2(m, 4, 4, 1);
    e[1] = t2(m, 4, 4, 2);
    tt = ir_type_tuple(m, 2, e);
    local = ir_type_tensor_var(m, IR_F32, 2, d, ir_str(m, "d"));
    xs = ir_region_add_arg(m, f, tt, "xs");
    if (fn) {
        ir_id xi = ir_region_add_arg(m, fn, local, "xi");
        ir_id r = ir_op_add(m, fn, kind, 1, &xi, 1, &local, NULL);
        ir_region_add_result(m, fn, ir_op_output(m, r, 0));
    }
    v = xs;
    for (int i = 0; i < 2; i++) {
        ir_id p = ir_op_add(m, f, IR_OP_PMAP, 1, &v, 1, &tt, NULL);
        ir_op_set_string(m, p, "device_var", "d");
        ir_op_set_ints(m, p, "devices", 2, devs);
        if (fn) {
            ir_op_set_callee(m, p, fn);
        } else {
            ir_id body = ir_body_new(m);
            ir_id xi = ir_region_add_arg(m, body, local, "xi");
            ir_id r = ir_op_add(m, body, kind, 1, &xi, 1, &local, NULL);
            ir_region_add_result(m, body, ir_op_output(m, r, 0));
            m->ops[p].body = body;
            m->regions[body].parent = p;
        }
        v = ir_op_output(m, p, 0);
    }
    ir_region_add_result(m, f, v);
    return m;
}

/*
 * A pmap calling a function hashes as a pmap owning a copy of its body:
 * sharing does not change the hash, nor the callee's name or place; its
 * content does.
 */
static void
test_callee(void **state)
{
    di_hash own, shared, renamed, before, other, relu_main;
    ir_module *m;
    (void)state;
    module_hash(calls_module(NULL, 0, IR_OP_RELU), &own, 1);
    module_hash(calls_module("layer", 0, IR_OP_RELU), &shared, 1);
    module_hash(calls_module("other name", 0, IR_OP_RELU), &renamed, 1);
    module_hash(calls_module("layer", 1, IR_OP_RELU), &before, 1);
    module_hash(calls_module("layer", 0, IR_OP_SIGMOID), &other, 1);
    assert_true(same(&own, &shared));
    assert_true(same(&shared, &renamed));
    assert_true(same(&shared, &before));
    assert_false(same(&shared, &other));
    /* An uncalled function is the module's API: its name counts. */
    m = calls_module("layer", 0, IR_OP_RELU);
    relu_func(m, "spare", 4);
    module_hash(m, &relu_main, 1);
    assert_false(same(&shared, &relu_main));
    /* A cycle of calls (which the verifier rejects) hashes without looping. */
    m = calls_module("layer", 0, IR_OP_RELU);
    {
        ir_id fn = ir_func_find(m, "layer"), main = ir_func_find(m, "main");
        ir_id p = m->regions[main].ops[0];
        ir_op_set_callee(m, p, main);
        ir_hash(m, &other);
        ir_op_set_callee(m, p, fn);
    }
    ir_module_free(m);
}

/* f(x) = Relu(x) as function `name` of m. */
static void
relu_func(ir_module *m, const char *name, int64_t n)
{
    ir_id f = ir_func_new(m, name), t = t2(m, n, n, 0);
    ir_id x = ir_region_add_arg(m, f, t, "x");
    ir_id r = ir_op_add(m, f, IR_OP_RELU, 1, &x, 1, &t, NULL);
    ir_region_add_result(m, f, ir_op_output(m, r, 0));
}

static void
test_functions(void **state)
{
    ir_module *m;
    di_hash a, b, c, d;
    (void)state;
    /* The order of non-entry functions does not matter; their names do. */
    m = ir_module_new();
    relu_func(m, "main", 2);
    relu_func(m, "helper", 3);
    relu_func(m, "other", 4);
    module_hash(m, &a, 1);
    m = ir_module_new();
    relu_func(m, "other", 4);
    relu_func(m, "main", 2);
    relu_func(m, "helper", 3);
    module_hash(m, &b, 1);
    m = ir_module_new();
    relu_func(m, "main", 2);
    relu_func(m, "helper2", 3);
    relu_func(m, "other", 4);
    module_hash(m, &c, 1);
    assert_true(same(&a, &b));
    assert_false(same(&a, &c));
    /* Which function is the entry matters. */
    m = ir_module_new();
    relu_func(m, "main", 3);
    relu_func(m, "helper", 2);
    relu_func(m, "other", 4);
    module_hash(m, &d, 1);
    assert_false(same(&a, &d));
}

static void
test_data(void **state)
{
    float w[4] = {1, 2, 3, 4};
    ir_module *m;
    ir_id f, t, x, c, in[2];
    di_hash h0, h1, h2, h3, h4;
    (void)state;
    m = ir_module_new();
    f = ir_func_new(m, "main");
    t = t2(m, 2, 2, 0);
    x = ir_region_add_arg(m, f, t, "w");
    c = ir_op_add(m, f, IR_OP_CONSTANT, 0, NULL, 1, &t, NULL);
    ir_op_set_tensor(m, c, "value", t, w, sizeof w);
    in[0] = x;
    in[1] = ir_op_output(m, c, 0);
    ir_region_add_result(m, f, ir_op_output(m, ir_op_add(m, f, IR_OP_ADD, 2, in, 1, &t, NULL), 0));
    module_hash(m, &h0, 0);

    /* Constant bytes count. */
    w[3] = 5;
    ir_op_set_tensor(m, c, "value", t, w, sizeof w);
    module_hash(m, &h1, 0);
    assert_false(same(&h0, &h1));

    /* So does initializer data, and its presence. */
    ir_value_set_init(m, x, w, sizeof w);
    module_hash(m, &h2, 0);
    assert_false(same(&h1, &h2));
    w[0] = 9;
    ir_value_set_init(m, x, w, sizeof w);
    module_hash(m, &h3, 0);
    assert_false(same(&h2, &h3));

    /* A clone hashes the same. */
    {
        ir_module *k = ir_module_clone(m);
        module_hash(k, &h4, 1);
        assert_true(same(&h3, &h4));
    }
    ir_module_free(m);
}

/*
 * The known answer: the hash of a small fixed module. If this changes, every
 * cached result keyed by a module hash is orphaned: changing the encoding is a
 * cache-format change (bump HASH_VERSION in lib/ir/hash.c and update this).
 */
static void
test_known_answer(void **state)
{
    static const int64_t shape[1] = {2};
    ir_module *m = ir_module_new();
    ir_id f = ir_func_new(m, "main"), mesh, x, w, mm, sm, in[2], tx, tw, ty;
    int64_t dx[2] = {8, 4}, dw[2] = {4, 6}, dy[2] = {8, 6}, split[1] = {0}, rep[1] = {IR_PLACE_R};
    di_hash h;
    char hex[65];
    (void)state;
    mesh = ir_mesh_add(m, "mesh", 1, shape, NULL);
    tx = ir_type_dtensor(m, IR_F32, 2, dx, mesh, split);
    tw = ir_type_dtensor(m, IR_F32, 2, dw, mesh, rep);
    ty = ir_type_dtensor(m, IR_F32, 2, dy, mesh, rep);
    x = ir_region_add_arg(m, f, tx, "x");
    w = ir_region_add_arg(m, f, tw, "w");
    in[0] = x;
    in[1] = w;
    mm = ir_op_add(m, f, IR_OP_MATMUL, 2, in, 1, &ty, NULL);
    in[0] = ir_op_output(m, mm, 0);
    sm = ir_op_add(m, f, IR_OP_SOFTMAX, 1, in, 1, &ty, NULL);
    ir_op_set_int(m, sm, "axis", 1);
    ir_region_add_result(m, f, ir_op_output(m, sm, 0));
    module_hash(m, &h, 1);
    di_hash_hex(&h, hex);
    print_message("known-answer hash %s\n", hex);
    assert_string_equal(hex, "6b273d8e7fef0d461336957c17008304399ca0f13425601ae139eb7f97ff9617");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rename),      cmocka_unit_test(test_reorder),
        cmocka_unit_test(test_round_trips), cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_pmap_devvar), cmocka_unit_test(test_functions),
        cmocka_unit_test(test_data),        cmocka_unit_test(test_known_answer),
        cmocka_unit_test(test_callee),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

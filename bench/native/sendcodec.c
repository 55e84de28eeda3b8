/* A native codec PROTOTYPE for issue 29: NOT part of pyrmq (pure Python is the product's rule).
 *
 * Built and loaded only by bench/native_codec.py, to measure what an optional extension (with the pure-Python
 * path as fallback, as redis-py has hiredis) would take off pyrmq's client CPU:
 *
 *   configure(auto_create_key, default_queue_nums, version, msgext_cls)
 *   encode_send(group, topic, queue_id, sys_flag, born, flag, properties, body, opaque) -> bytes
 *       one SEND_MESSAGE_V2 frame, byte-identical to Producer._request(...) + RemotingCommand.encode_into
 *       (JSON header, extFields a..h and i, json.encoder.encode_basestring escaping)
 *   decode_send_answer(buf) -> None | int | tuple
 *       None: buf holds less than one frame; int n: the first frame (n bytes) is not of the shape scanned here
 *       (the caller decodes buf[:n] with pyrmq's FrameDecoder); tuple: (n, code, flag, opaque, remark, msgId,
 *       queueId or None, queueOffset or -1, MSG_REGION, TRACE_ON != "false")
 *   decode_messages(buf, broker_name, min_offset, max_offset) -> list of MessageExt
 *       what pyrmq.client.message.decode_messages builds (same lazy fields), in C
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static char *g_mid = NULL;      /* ,"c":"TBW102","d":"4","e":" */
static Py_ssize_t g_mid_len = 0;
static char *g_tail = NULL;     /* ,"serializeTypeCurrentRPC":"JSON","version":409} */
static Py_ssize_t g_tail_len = 0;
static PyTypeObject *g_msgext = NULL;
/* MessageExt's slot descriptors: topic body raw_properties queue_offset _head _batch _properties */
static PyObject *g_descr[7];
static PyObject *g_zlib_decompress = NULL;
static PyObject *g_region_cache = NULL; /* the last MSG_REGION value (it never changes per broker) */

static const char HEX[] = "0123456789abcdef";

/* ---- JSON string escaping, as json.encoder.encode_basestring (C version), on UTF-8 bytes ---------------------- */

static Py_ssize_t esc_len(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t out = 2;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') out += 1;
        else if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') out += 2;
        else out += 6;
    }
    return out;
}

static char *esc_write(char *o, const unsigned char *s, Py_ssize_t n) {
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') { *o++ = (char)c; continue; }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        default:
            *o++ = 'u'; *o++ = '0'; *o++ = '0'; *o++ = HEX[c >> 4]; *o++ = HEX[c & 15];
        }
    }
    *o++ = '"';
    return o;
}

static int fmt_i64(char *buf, long long v) { /* decimal text, returns its length (buf >= 21 bytes) */
    char tmp[24];
    int n = 0, neg = v < 0;
    unsigned long long u = neg ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
    int len = 0;
    if (neg) buf[len++] = '-';
    while (n) buf[len++] = tmp[--n];
    return len;
}

static int take_utf8(PyObject *s, const char **p, Py_ssize_t *n, const char *what) {
    if (!PyUnicode_Check(s)) {
        PyErr_Format(PyExc_TypeError, "%s must be str", what);
        return -1;
    }
    *p = PyUnicode_AsUTF8AndSize(s, n);
    return *p ? 0 : -1;
}

static char *dup_text(PyObject *bytes_obj, Py_ssize_t *len) {
    char *src; Py_ssize_t n;
    if (PyBytes_AsStringAndSize(bytes_obj, &src, &n) < 0) return NULL;
    char *d = PyMem_Malloc(n + 1);
    if (!d) { PyErr_NoMemory(); return NULL; }
    memcpy(d, src, n);
    d[n] = 0;
    *len = n;
    return d;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *key, *nums, *cls;
    long version;
    if (!PyArg_ParseTuple(args, "UUlO", &key, &nums, &version, &cls)) return NULL;
    const char *k, *q; Py_ssize_t kn, qn;
    if (take_utf8(key, &k, &kn, "auto_create_key") < 0 || take_utf8(nums, &q, &qn, "default_queue_nums") < 0)
        return NULL;
    Py_ssize_t cap = 32 + esc_len((const unsigned char *)k, kn) + esc_len((const unsigned char *)q, qn);
    char *mid = PyMem_Malloc(cap);
    if (!mid) return PyErr_NoMemory();
    char *o = mid;
    memcpy(o, ",\"c\":", 5); o += 5;
    o = esc_write(o, (const unsigned char *)k, kn);
    memcpy(o, ",\"d\":", 5); o += 5;
    o = esc_write(o, (const unsigned char *)q, qn);
    memcpy(o, ",\"e\":\"", 6); o += 6;
    PyMem_Free(g_mid);
    g_mid = mid; g_mid_len = o - mid;
    PyObject *tail = PyBytes_FromFormat(",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":%ld}", version);
    if (!tail) return NULL;
    PyMem_Free(g_tail);
    g_tail = dup_text(tail, &g_tail_len);
    Py_DECREF(tail);
    if (!g_tail) return NULL;

    if (!PyType_Check(cls)) { PyErr_SetString(PyExc_TypeError, "msgext_cls must be a class"); return NULL; }
    static const char *names[7] = {"topic", "body", "raw_properties", "queue_offset", "_head", "_batch", "_properties"};
    for (int i = 0; i < 7; i++) {
        PyObject *d = PyObject_GetAttrString(cls, names[i]);
        if (!d) return NULL;
        if (!Py_TYPE(d)->tp_descr_set) { Py_DECREF(d); PyErr_Format(PyExc_TypeError, "%s is not a slot", names[i]); return NULL; }
        Py_XSETREF(g_descr[i], d);
    }
    Py_INCREF(cls);
    Py_XSETREF(g_msgext, (PyTypeObject *)cls);
    if (!g_zlib_decompress) {
        PyObject *zlib = PyImport_ImportModule("zlib");
        if (!zlib) return NULL;
        g_zlib_decompress = PyObject_GetAttrString(zlib, "decompress");
        Py_DECREF(zlib);
        if (!g_zlib_decompress) return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- encode ------------------------------------------------------------------------------------------------------ */

static PyObject *encode_send(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 9) { PyErr_SetString(PyExc_TypeError, "encode_send takes 9 arguments"); return NULL; }
    if (!g_mid) { PyErr_SetString(PyExc_RuntimeError, "call configure() first"); return NULL; }
    const char *group, *topic, *props = NULL;
    Py_ssize_t gn, tn, pn = 0;
    if (take_utf8(args[0], &group, &gn, "group") < 0 || take_utf8(args[1], &topic, &tn, "topic") < 0) return NULL;
    long long qid = PyLong_AsLongLong(args[2]);
    long long sys_flag = PyLong_AsLongLong(args[3]);
    long long born = PyLong_AsLongLong(args[4]);
    long long flag = PyLong_AsLongLong(args[5]);
    long long opaque = PyLong_AsLongLong(args[8]);
    if (PyErr_Occurred()) return NULL;
    if (args[6] != Py_None) {
        if (take_utf8(args[6], &props, &pn, "properties") < 0) return NULL;
        if (pn == 0) props = NULL; /* "" is left out, as `if p.properties:` does */
    }
    Py_buffer body;
    if (PyObject_GetBuffer(args[7], &body, PyBUF_SIMPLE) < 0) return NULL;

    char nq[24], ns[24], nb[24], nf[24], no[24];
    int lq = fmt_i64(nq, qid), ls = fmt_i64(ns, sys_flag), lb = fmt_i64(nb, born), lf = fmt_i64(nf, flag);
    int lo = fmt_i64(no, opaque);
    static const char H0[] = "{\"code\":310,\"extFields\":{\"a\":";
    static const char HB[] = ",\"b\":";
    static const char HF[] = "\",\"f\":\"";
    static const char HG[] = "\",\"g\":\"";
    static const char HH[] = "\",\"h\":\"";
    static const char HI[] = "\",\"i\":";
    static const char HE[] = "},\"flag\":0,\"language\":\"PYTHON\",\"opaque\":";
    Py_ssize_t hl = (sizeof H0 - 1) + esc_len((const unsigned char *)group, gn) + (sizeof HB - 1)
        + esc_len((const unsigned char *)topic, tn) + g_mid_len + lq + (sizeof HF - 1) + ls + (sizeof HG - 1) + lb
        + (sizeof HH - 1) + lf + 1 + (sizeof HE - 1) + lo + g_tail_len;
    if (props) hl += (sizeof HI - 1) - 1 + esc_len((const unsigned char *)props, pn);
    if (hl > 0xFFFFFF) { PyBuffer_Release(&body); PyErr_SetString(PyExc_ValueError, "header too long"); return NULL; }
    Py_ssize_t total = 8 + hl + body.len;
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) { PyBuffer_Release(&body); return NULL; }
    unsigned char *o0 = (unsigned char *)PyBytes_AS_STRING(out);
    uint32_t t = (uint32_t)(4 + hl + body.len), w = (uint32_t)hl;
    o0[0] = t >> 24; o0[1] = t >> 16; o0[2] = t >> 8; o0[3] = t;
    o0[4] = w >> 24; o0[5] = w >> 16; o0[6] = w >> 8; o0[7] = w;
    char *o = (char *)o0 + 8;
#define PUT(s, n) do { memcpy(o, (s), (n)); o += (n); } while (0)
    PUT(H0, sizeof H0 - 1);
    o = esc_write(o, (const unsigned char *)group, gn);
    PUT(HB, sizeof HB - 1);
    o = esc_write(o, (const unsigned char *)topic, tn);
    PUT(g_mid, g_mid_len);
    PUT(nq, lq); PUT(HF, sizeof HF - 1); PUT(ns, ls); PUT(HG, sizeof HG - 1); PUT(nb, lb);
    PUT(HH, sizeof HH - 1); PUT(nf, lf);
    if (props) {
        PUT(HI, sizeof HI - 1);
        o = esc_write(o, (const unsigned char *)props, pn);
    } else {
        *o++ = '"';
    }
    PUT(HE, sizeof HE - 1); PUT(no, lo); PUT(g_tail, g_tail_len);
    if (body.len) PUT(body.buf, body.len);
#undef PUT
    PyBuffer_Release(&body);
    if (o - (char *)o0 != total) {
        Py_DECREF(out);
        PyErr_Format(PyExc_SystemError, "encode_send: wrote %zd of %zd bytes", (Py_ssize_t)(o - (char *)o0), total);
        return NULL;
    }
    return out;
}

/* ---- decode of a SEND answer: a minimal scanner of the header shape the broker writes ---------------------------- */

typedef struct { const char *p, *end; } Scan;

static void ws(Scan *s) { while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t')) s->p++; }

/* an ASCII string without escapes: returns 0 and its content; -1 for anything else */
static int sstr(Scan *s, const char **a, Py_ssize_t *n) {
    ws(s);
    if (s->p >= s->end || *s->p != '"') return -1;
    const char *q = ++s->p;
    while (s->p < s->end && *s->p != '"') {
        /* escapes, control characters, non-ASCII (UTF-8 checks included): json's job */
        if (*s->p == '\\' || (unsigned char)*s->p < 0x20 || (unsigned char)*s->p >= 0x80) return -1;
        s->p++;
    }
    if (s->p >= s->end) return -1;
    *a = q; *n = s->p - q;
    s->p++;
    return 0;
}

static int sint(Scan *s, long long *v) {
    ws(s);
    int neg = 0;
    if (s->p < s->end && *s->p == '-') { neg = 1; s->p++; }
    if (s->p >= s->end || *s->p < '0' || *s->p > '9') return -1;
    if (*s->p == '0' && s->p + 1 < s->end && s->p[1] >= '0' && s->p[1] <= '9') return -1; /* not JSON */
    long long x = 0; int digits = 0;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
        if (++digits > 18) return -1;
        x = x * 10 + (*s->p++ - '0');
    }
    if (s->p < s->end && (*s->p == '.' || *s->p == 'e' || *s->p == 'E')) return -1;
    *v = neg ? -x : x;
    return 0;
}

static int lit(Scan *s, char c) { ws(s); if (s->p < s->end && *s->p == c) { s->p++; return 0; } return -1; }

static int digits_value(const char *a, Py_ssize_t n, long long *v) { /* plain decimal text, as the broker writes */
    if (n == 0 || n > 18) return -1;
    long long x = 0; Py_ssize_t i = 0; int neg = 0;
    if (a[0] == '-') { neg = 1; i = 1; if (n == 1) return -1; }
    for (; i < n; i++) { if (a[i] < '0' || a[i] > '9') return -1; x = x * 10 + (a[i] - '0'); }
    *v = neg ? -x : x;
    return 0;
}

#define KEY_IS(a, n, lit_) ((n) == (Py_ssize_t)(sizeof(lit_) - 1) && memcmp((a), (lit_), (n)) == 0)

static PyObject *decode_send_answer(PyObject *self, PyObject *arg) {
    Py_buffer b;
    if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *u = b.buf;
    if (b.len < 8) { PyBuffer_Release(&b); Py_RETURN_NONE; }
    uint32_t total = ((uint32_t)u[0] << 24) | ((uint32_t)u[1] << 16) | ((uint32_t)u[2] << 8) | u[3];
    uint32_t word = ((uint32_t)u[4] << 24) | ((uint32_t)u[5] << 16) | ((uint32_t)u[6] << 8) | u[7];
    Py_ssize_t flen = (Py_ssize_t)total + 4;
    if (total > 16 * 1024 * 1024 || total < 4 || (word & 0xFFFFFF) > total - 4) {
        PyBuffer_Release(&b);
        return PyLong_FromSsize_t(b.len < flen ? b.len : flen); /* the fallback raises pyrmq's ProtocolError */
    }
    if (b.len < flen) { PyBuffer_Release(&b); Py_RETURN_NONE; }
    Py_ssize_t hl = word & 0xFFFFFF;
    if ((word >> 24) != 0 || 4 + hl != (Py_ssize_t)total) goto fallback; /* ROCKETMQ header, or a body */

    Scan s = {(const char *)u + 8, (const char *)u + 8 + hl};
    long long code = 0, flag = 0, opaque = 0, version = 0, qoff = -1, qid = 0;
    int have_qid = 0, trace_on = 1;
    const char *remark = NULL, *msgid = "", *region = NULL, *a;
    Py_ssize_t remark_n = 0, msgid_n = 0, region_n = 0, n;
    int has_remark = 0, has_ext = 0;
    if (lit(&s, '{') < 0) goto fallback;
    ws(&s);
    if (s.p < s.end && *s.p == '}') { s.p++; goto done; }
    for (;;) {
        if (sstr(&s, &a, &n) < 0 || lit(&s, ':') < 0) goto fallback;
        if (KEY_IS(a, n, "code")) { if (sint(&s, &code) < 0) goto fallback; }
        else if (KEY_IS(a, n, "flag")) { if (sint(&s, &flag) < 0) goto fallback; }
        else if (KEY_IS(a, n, "opaque")) { if (sint(&s, &opaque) < 0) goto fallback; }
        else if (KEY_IS(a, n, "version")) { if (sint(&s, &version) < 0) goto fallback; }
        else if (KEY_IS(a, n, "language") || KEY_IS(a, n, "serializeTypeCurrentRPC")) {
            const char *x; Py_ssize_t xn;
            if (sstr(&s, &x, &xn) < 0) goto fallback;
        }
        else if (KEY_IS(a, n, "remark")) {
            if (sstr(&s, &remark, &remark_n) < 0) goto fallback; /* null or escapes: json's job */
            has_remark = 1;
        }
        else if (KEY_IS(a, n, "extFields")) {
            if (has_ext++ || lit(&s, '{') < 0) goto fallback; /* a second one replaces the first in json */
            ws(&s);
            if (s.p < s.end && *s.p == '}') s.p++;
            else for (;;) {
                const char *k, *v; Py_ssize_t kn, vn;
                if (sstr(&s, &k, &kn) < 0 || lit(&s, ':') < 0 || sstr(&s, &v, &vn) < 0) goto fallback;
                if (KEY_IS(k, kn, "msgId")) { msgid = v; msgid_n = vn; }
                else if (KEY_IS(k, kn, "queueId")) { if (digits_value(v, vn, &qid) < 0) goto fallback; have_qid = 1; }
                else if (KEY_IS(k, kn, "queueOffset")) { if (digits_value(v, vn, &qoff) < 0) goto fallback; }
                else if (KEY_IS(k, kn, "MSG_REGION")) { region = v; region_n = vn; }
                else if (KEY_IS(k, kn, "TRACE_ON")) { trace_on = !KEY_IS(v, vn, "false"); }
                else goto fallback; /* transactionId and anything else: the generic path */
                ws(&s);
                if (s.p < s.end && *s.p == ',') { s.p++; continue; }
                if (lit(&s, '}') < 0) goto fallback;
                break;
            }
        }
        else goto fallback;
        ws(&s);
        if (s.p < s.end && *s.p == ',') { s.p++; continue; }
        if (lit(&s, '}') < 0) goto fallback;
        break;
    }
done:
    ws(&s);
    if (s.p != s.end) goto fallback;
    if (code < INT32_MIN || code > INT32_MAX || opaque < INT32_MIN || opaque > INT32_MAX) goto fallback;
    {
        PyObject *py_remark, *py_msgid, *py_region, *py_qid;
        if (has_remark) {
            py_remark = PyUnicode_DecodeUTF8(remark, remark_n, NULL);
            if (!py_remark) { PyErr_Clear(); goto fallback; }
        } else {
            py_remark = Py_NewRef(Py_None);
        }
        py_msgid = PyUnicode_DecodeUTF8(msgid, msgid_n, NULL);
        if (!py_msgid) { PyErr_Clear(); Py_DECREF(py_remark); goto fallback; }
        if (region == NULL) {
            region = "DefaultRegion"; region_n = 13;
        }
        if (g_region_cache && PyUnicode_IS_ASCII(g_region_cache) && PyUnicode_GET_LENGTH(g_region_cache) == region_n
                && memcmp(PyUnicode_DATA(g_region_cache), region, region_n) == 0) {
            py_region = Py_NewRef(g_region_cache);
        } else {
            py_region = PyUnicode_DecodeUTF8(region, region_n, NULL);
            if (!py_region) { PyErr_Clear(); Py_DECREF(py_remark); Py_DECREF(py_msgid); goto fallback; }
            Py_XSETREF(g_region_cache, Py_NewRef(py_region));
        }
        py_qid = have_qid ? PyLong_FromLongLong(qid) : Py_NewRef(Py_None);
        PyBuffer_Release(&b);
        PyObject *r = PyTuple_New(10);
        if (!r) return NULL;
        PyTuple_SET_ITEM(r, 0, PyLong_FromSsize_t(flen));
        PyTuple_SET_ITEM(r, 1, PyLong_FromLongLong(code));
        PyTuple_SET_ITEM(r, 2, PyLong_FromLongLong(flag));
        PyTuple_SET_ITEM(r, 3, PyLong_FromLongLong(opaque));
        PyTuple_SET_ITEM(r, 4, py_remark);
        PyTuple_SET_ITEM(r, 5, py_msgid);
        PyTuple_SET_ITEM(r, 6, py_qid);
        PyTuple_SET_ITEM(r, 7, PyLong_FromLongLong(qoff));
        PyTuple_SET_ITEM(r, 8, py_region);
        PyTuple_SET_ITEM(r, 9, PyBool_FromLong(trace_on));
        return r;
    }
fallback:
    PyBuffer_Release(&b);
    return PyLong_FromSsize_t(flen);
}

/* ---- decode of stored records (a PULL body) into MessageExt ------------------------------------------------------- */

static inline int32_t be32(const unsigned char *p) { return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]); }
static inline int64_t be64(const unsigned char *p) { return (int64_t)(((uint64_t)(uint32_t)be32(p) << 32) | (uint32_t)be32(p + 4)); }

static int set_slot(int i, PyObject *obj, PyObject *value) { /* steals value */
    if (!value) return -1;
    int r = Py_TYPE(g_descr[i])->tp_descr_set(g_descr[i], obj, value);
    Py_DECREF(value);
    return r;
}

static PyObject *decode_messages(PyObject *self, PyObject *args) {
    Py_buffer b;
    PyObject *broker;
    long long min_off, max_off;
    if (!g_msgext) { PyErr_SetString(PyExc_RuntimeError, "call configure() first"); return NULL; }
    if (!PyArg_ParseTuple(args, "y*OLL", &b, &broker, &min_off, &max_off)) return NULL;
    PyObject *batch = Py_BuildValue("(OLL)", broker, min_off, max_off);
    PyObject *out = PyList_New(0);
    const unsigned char *u = b.buf;
    Py_ssize_t n = b.len, pos = 0;
    const unsigned char *last_raw = NULL; Py_ssize_t last_len = -1;
    PyObject *last_topic = NULL;
    if (!batch || !out) goto error;
    while (pos < n) {
        if (n - pos < 88) goto corrupt;
        int32_t size = be32(u + pos);
        int64_t qoff = be64(u + pos + 20);
        int32_t sys_flag = be32(u + pos + 36);
        Py_ssize_t hs = 88 + ((sys_flag >> 4) & 1) * 12 + ((sys_flag >> 5) & 1) * 12;
        if (size <= 0 || n - pos < hs) goto corrupt;
        int32_t body_len = be32(u + pos + hs - 4);
        Py_ssize_t p = pos + hs;
        if (body_len < 0 || n - p < (Py_ssize_t)body_len + 1) goto corrupt;
        const unsigned char *body = u + p;
        p += body_len;
        Py_ssize_t topic_len = u[p];
        if (n - p < 1 + topic_len + 2) goto corrupt;
        const unsigned char *raw_topic = u + p + 1;
        p += 1 + topic_len;
        Py_ssize_t props_len = ((Py_ssize_t)u[p] << 8) | u[p + 1];
        if (n - (p + 2) < props_len) props_len = n - (p + 2); /* a slice past the end is short, as in Python */
        if (last_topic == NULL || topic_len != last_len || memcmp(raw_topic, last_raw, topic_len) != 0) {
            PyObject *t = PyUnicode_DecodeUTF8((const char *)raw_topic, topic_len, "replace");
            if (!t) goto error;
            Py_XSETREF(last_topic, t);
            last_raw = raw_topic; last_len = topic_len;
        }
        PyObject *py_body = PyBytes_FromStringAndSize((const char *)body, body_len);
        if (!py_body) goto error;
        if ((sys_flag & 1) && (((sys_flag & 0x700) >> 8) == 0 || ((sys_flag & 0x700) >> 8) == 3)) {
            PyObject *inflated = PyObject_CallOneArg(g_zlib_decompress, py_body);
            Py_DECREF(py_body);
            if (!inflated) goto error;
            py_body = inflated;
        }
        PyObject *m = g_msgext->tp_alloc(g_msgext, 0);
        if (!m) { Py_DECREF(py_body); goto error; }
        if (set_slot(0, m, Py_NewRef(last_topic)) < 0 || set_slot(1, m, py_body) < 0
            || set_slot(2, m, PyBytes_FromStringAndSize((const char *)u + p + 2, props_len)) < 0
            || set_slot(3, m, PyLong_FromLongLong(qoff)) < 0
            || set_slot(4, m, PyBytes_FromStringAndSize((const char *)u + pos, hs)) < 0
            || set_slot(5, m, Py_NewRef(batch)) < 0 || set_slot(6, m, Py_NewRef(Py_None)) < 0
            || PyList_Append(out, m) < 0) {
            Py_DECREF(m);
            goto error;
        }
        Py_DECREF(m);
        pos += size;
    }
    Py_XDECREF(last_topic);
    Py_DECREF(batch);
    PyBuffer_Release(&b);
    return out;
corrupt:
    PyErr_Format(PyExc_ValueError, "corrupt message record at byte %zd", pos);
error:
    Py_XDECREF(last_topic);
    Py_XDECREF(batch);
    Py_XDECREF(out);
    PyBuffer_Release(&b);
    return NULL;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS, "configure(auto_create_key, default_queue_nums, version, msgext_cls)"},
    {"encode_send", (PyCFunction)(void (*)(void))encode_send, METH_FASTCALL,
     "encode_send(group, topic, queue_id, sys_flag, born, flag, properties, body, opaque) -> bytes"},
    {"decode_send_answer", decode_send_answer, METH_O, "decode_send_answer(buf) -> None | int | tuple"},
    {"decode_messages", decode_messages, METH_VARARGS, "decode_messages(buf, broker_name, min_offset, max_offset)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "sendcodec", "pyrmq issue 29 native codec prototype", -1, methods};

PyMODINIT_FUNC PyInit_sendcodec(void) {
    return PyModule_Create(&module);
}

/* HTTP/1.x response parsing over llhttp (see httpresp.h). */
#include "util/httpresp.h"

#include <stdlib.h>
#include <string.h>

#define PARSER_OF(l) ((hresp_parser *)((char *)(l)-offsetof(hresp_parser, llh)))

static int on_message_begin(llhttp_t *l)
{
    hresp_parser *p = PARSER_OF(l);
    p->in_message = true;
    p->body_len = 0;
    p->body_bytes = 0;
    p->body_truncated = false;
    return 0;
}

static int on_headers_complete(llhttp_t *l)
{
    /* 1: the response has no body (it answers HEAD); llhttp then ends the message here. */
    return PARSER_OF(l)->head ? 1 : 0;
}

static int on_body(llhttp_t *l, const char *at, size_t len)
{
    hresp_parser *p = PARSER_OF(l);
    p->body_bytes += len;
    if (!p->collect || p->body_truncated)
        return 0;
    if (p->body_len + len > p->body_cap && p->body_cap < p->body_max) {
        size_t cap = p->body_cap ? p->body_cap : 1024;
        while (cap < p->body_len + len && cap < p->body_max)
            cap *= 2;
        if (cap > p->body_max)
            cap = p->body_max;
        char *b = realloc(p->body, cap);
        if (b) {
            p->body = b;
            p->body_cap = cap;
        }
    }
    size_t room = p->body_cap - p->body_len;
    if (len > room) {
        len = room;
        p->body_truncated = true;
    }
    if (len)
        memcpy(p->body + p->body_len, at, len);
    p->body_len += len;
    return 0;
}

static int on_message_complete(llhttp_t *l)
{
    hresp_parser *p = PARSER_OF(l);
    hresp r = {
        .status = l->status_code,
        .keep_alive = llhttp_should_keep_alive(l) != 0,
        .body = p->collect ? p->body : NULL,
        .body_len = p->body_len,
        .body_truncated = p->body_truncated,
        .body_bytes = p->body_bytes,
    };
    p->in_message = false;
    if (p->cb(p->ud, &r) != 0) {
        p->stopped = true;
        return HPE_PAUSED;
    }
    return 0;
}

void hresp_init(hresp_parser *p, bool head, bool collect, size_t body_max, hresp_cb cb, void *ud)
{
    memset(p, 0, sizeof *p);
    llhttp_settings_init(&p->settings);
    p->settings.on_message_begin = on_message_begin;
    p->settings.on_headers_complete = on_headers_complete;
    p->settings.on_body = on_body;
    p->settings.on_message_complete = on_message_complete;
    p->head = head;
    p->collect = collect;
    p->body_max = body_max;
    p->cb = cb;
    p->ud = ud;
    llhttp_init(&p->llh, HTTP_RESPONSE, &p->settings);
}

void hresp_free(hresp_parser *p)
{
    free(p->body);
    p->body = NULL;
    p->body_cap = 0;
}

void hresp_reset(hresp_parser *p)
{
    llhttp_init(&p->llh, HTTP_RESPONSE, &p->settings);
    p->in_message = false;
    p->stopped = false;
    p->body_len = 0;
    p->err = NULL;
}

int hresp_feed(hresp_parser *p, const char *data, size_t len, size_t *used)
{
    if (p->stopped) {
        p->err = "data after a response that ended the parse";
        return HRESP_ERROR;
    }
    llhttp_errno_t e = llhttp_execute(&p->llh, data, len);
    if (e == HPE_OK) {
        *used = len;
        return HRESP_OK;
    }
    if (e == HPE_PAUSED && p->stopped) {
        *used = (size_t)(llhttp_get_error_pos(&p->llh) - data);
        /* Ready for more data on this connection (the caller may continue). */
        llhttp_resume(&p->llh);
        p->stopped = false;
        return HRESP_STOP;
    }
    p->err = llhttp_get_error_reason(&p->llh);
    if (!p->err || !*p->err)
        p->err = llhttp_errno_name(e);
    return HRESP_ERROR;
}

int hresp_eof(hresp_parser *p)
{
    if (!p->in_message)
        return HRESP_OK;
    if (!llhttp_message_needs_eof(&p->llh)) {
        p->err = "connection closed inside a response";
        return HRESP_ERROR;
    }
    llhttp_errno_t e = llhttp_finish(&p->llh);
    if (e == HPE_OK)
        return HRESP_OK;
    if (e == HPE_PAUSED && p->stopped) {
        p->stopped = false;
        return HRESP_STOP;
    }
    p->err = "connection closed inside a response";
    return HRESP_ERROR;
}

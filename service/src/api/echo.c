/* /echo: POST returns the request body byte for byte with its Content-Type; GET returns the
 * percent-decoded ?msg= text. */
#include "api/api.h"

#include <string.h>

#include "llhttp.h"

void api_echo(http_request *r, void *ctx)
{
    (void)ctx;
    if (r->method == HTTP_POST) {
        const http_str *ct = &r->headers[HTTP_H_CONTENT_TYPE];
        char ctype[HTTP_CTYPE_MAX + 1] = "application/octet-stream";
        if (ct->p && ct->len > 0) {
            if (ct->len > HTTP_CTYPE_MAX) {
                http_respond_error(r, 400, "Content-Type longer than 127 bytes", NULL);
                return;
            }
            memcpy(ctype, ct->p, ct->len);
            ctype[ct->len] = '\0';
        }
        http_respond_request_body(r, 200, ctype, NULL);
        return;
    }
    http_str msg;
    if (!http_query_param(r, "msg", &msg)) {
        http_respond_error(r, 400, "GET /echo needs ?msg=<text> (or POST a body)", NULL);
        return;
    }
    size_t size;
    char *out = http_scratch(r, &size);
    long n = http_percent_decode(msg.p, msg.len, out, size);
    if (n < 0) {
        http_respond_error(r, 400, "msg: bad percent-encoding", NULL);
        return;
    }
    http_respond(r, 200, "text/plain; charset=utf-8", NULL, out, (size_t)n);
}

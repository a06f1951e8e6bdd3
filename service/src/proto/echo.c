#include "proto/echo.h"

#include "net/conn.h"

static void echo_open(conn *c)
{
    conn_set_timeout(c, CONN_TIMEOUT_IDLE);
}

static ssize_t echo_data(conn *c, const char *data, size_t len)
{
    if (conn_output_full(c)) { /* the peer is not reading: keep the input, read no more */
        conn_yield(c);
        return 0;
    }
    if (conn_write(c, data, len) != 0)
        return PROTO_CLOSE;
    conn_set_timeout(c, CONN_TIMEOUT_IDLE);
    return (ssize_t)len;
}

const proto echo_proto = {
    .name = "echo",
    .state_size = 0,
    .on_open = echo_open,
    .on_data = echo_data,
    .on_timeout = NULL, /* an idle echo connection just closes */
    .on_close = NULL,
};

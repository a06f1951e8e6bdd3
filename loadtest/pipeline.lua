-- wrk script: 16 requests per write (HTTP/1.1 pipelining), for loadtest/bench_http.sh.
init = function(args)
    local depth = tonumber(args[1]) or 16
    local r = {}
    for i = 1, depth do
        r[i] = wrk.format(nil, wrk.path)
    end
    req = table.concat(r)
end

request = function()
    return req
end

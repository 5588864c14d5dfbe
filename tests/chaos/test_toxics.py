"""Each toxic's effect measured on real bytes: a client, the fault proxy (a
real process) and a real TCP echo/sink server, toxics set with toxiproxy-python
(through ``chaos.toxiproxy_client``)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from chaos.toxiproxy_client import ChaosProxy, ChaosToxiproxy
from tests.harness import WAIT_TIMEOUT

# Seconds a loaded 2-core machine may add to a delay.  The lower bounds are
# exact (a toxic never takes less than it says, however slow the machine);
# the upper bounds only catch a wrong effect (a delay applied twice, per
# write, a rate halved), with this much room.
SLACK = 1.0


@pytest.fixture
def toxiproxy(api) -> ChaosToxiproxy:
    return ChaosToxiproxy(api.host, api.port)


async def proxy_to(toxiproxy: ChaosToxiproxy, server, name: str = "p") -> ChaosProxy:
    return await asyncio.to_thread(toxiproxy.create, upstream=server.address, name=name)


async def add(proxy: ChaosProxy, **toxic):
    return await asyncio.to_thread(proxy.add_toxic, **toxic)


async def connect(proxy: ChaosProxy):
    return await asyncio.open_connection("127.0.0.1", int(proxy.listen.rsplit(":", 1)[1]))


async def round_trip(reader, writer, data: bytes = b"ping") -> float:
    start = time.monotonic()
    writer.write(data)
    assert await reader.readexactly(len(data)) == data
    return time.monotonic() - start


async def test_latency_each_way_and_chained(toxiproxy, tcp_servers):
    proxy = await proxy_to(toxiproxy, await tcp_servers("echo"))
    reader, writer = await connect(proxy)
    await round_trip(reader, writer)

    await add(proxy, type="latency", attributes={"latency": 200})        # live connection
    took = await round_trip(reader, writer)
    assert 0.2 <= took < 0.2 + SLACK

    await add(proxy, type="latency", stream="upstream", attributes={"latency": 100})
    took = await round_trip(reader, writer)
    assert 0.3 <= took < 0.3 + SLACK

    reader2, writer2 = await connect(proxy)                              # a new connection too
    took = await round_trip(reader2, writer2)
    assert 0.3 <= took < 0.3 + SLACK

    await asyncio.to_thread(proxy.destroy_toxic, "latency_downstream")
    await asyncio.to_thread(proxy.destroy_toxic, "latency_upstream")
    assert await round_trip(reader, writer) < took      # both gone: less than with them


async def test_latency_is_counted_from_arrival_so_writes_pipeline(toxiproxy, tcp_servers):
    proxy = await proxy_to(toxiproxy, await tcp_servers("echo"))
    await add(proxy, type="latency", attributes={"latency": 200})
    reader, writer = await connect(proxy)
    start = time.monotonic()
    for i in range(5):
        writer.write(b"%d" % i)
        await asyncio.sleep(0.02)
    assert await reader.readexactly(5) == b"01234"
    assert 0.2 + 0.08 <= time.monotonic() - start < 1.0          # not 5 x 200 ms


async def test_latency_jitter_stays_in_range(toxiproxy, tcp_servers):
    proxy = await proxy_to(toxiproxy, await tcp_servers("echo"))
    await add(proxy, type="latency", attributes={"latency": 100, "jitter": 50})
    reader, writer = await connect(proxy)
    times = [await round_trip(reader, writer) for _ in range(8)]
    assert min(times) >= 0.05 and max(times) < 0.15 + SLACK
    assert max(times) - min(times) > 0.005          # it does vary


async def test_toxicity_zero_never_applies(toxiproxy, tcp_servers):
    proxy = await proxy_to(toxiproxy, await tcp_servers("echo"))
    await add(proxy, type="latency", toxicity=0.0, attributes={"latency": 1000})
    reader, writer = await connect(proxy)
    assert await round_trip(reader, writer) < 1.0       # less than the toxic would add
    await asyncio.to_thread(proxy.update_toxic, "latency_downstream", toxicity=1.0)
    assert await round_trip(reader, writer) >= 1.0


async def test_bandwidth_within_ten_percent(toxiproxy, tcp_servers):
    sink = await tcp_servers("sink")
    proxy = await proxy_to(toxiproxy, sink)
    await add(proxy, type="bandwidth", stream="upstream", attributes={"rate": 250})   # KB/s
    reader, writer = await connect(proxy)
    payload = os.urandom(250_000)
    start = time.monotonic()
    writer.write(payload)
    assert await sink.wait_received(len(payload)) == payload
    took = sink.reads[-1][0] - start
    assert 0.9 <= took < 1.0 + SLACK, f"250 KB at 250 KB/s took {took:.3f} s"


async def test_bandwidth_downstream(toxiproxy, tcp_servers):
    proxy = await proxy_to(toxiproxy, await tcp_servers("echo"))
    await add(proxy, type="bandwidth", attributes={"rate": 100})
    reader, writer = await connect(proxy)
    payload = os.urandom(50_000)
    took = await round_trip(reader, writer, payload)
    assert 0.45 <= took < 0.5 + SLACK, f"50 KB at 100 KB/s took {took:.3f} s"


async def test_slow_close_delays_the_close(toxiproxy, tcp_servers):
    proxy = await proxy_to(toxiproxy, await tcp_servers("close"))
    reader, _ = await connect(proxy)
    start = time.monotonic()
    assert await reader.read() == b""
    at_once = time.monotonic() - start

    await add(proxy, type="slow_close", attributes={"delay": 300})
    reader, _ = await connect(proxy)
    start = time.monotonic()
    assert await reader.read() == b""
    delayed = time.monotonic() - start
    assert 0.3 <= delayed < 0.3 + SLACK and at_once < delayed


async def test_timeout_stalls_then_closes(toxiproxy, tcp_servers):
    echo = await tcp_servers("echo")
    proxy = await proxy_to(toxiproxy, echo)
    await add(proxy, type="timeout", attributes={"timeout": 300})
    reader, writer = await connect(proxy)
    start = time.monotonic()
    writer.write(b"lost")
    assert await reader.read() == b""                 # nothing came back, then closed
    assert 0.3 <= time.monotonic() - start < 0.3 + SLACK
    assert echo.received() == b"lost"                 # the other way still flowed


async def test_timeout_zero_holds_until_removed_then_closes(toxiproxy, tcp_servers):
    proxy = await proxy_to(toxiproxy, await tcp_servers("echo"))
    await add(proxy, type="timeout", stream="upstream", attributes={"timeout": 0})
    reader, writer = await connect(proxy)
    writer.write(b"held")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            await reader.read(10)
    # Removing it ends the connection: the data it dropped is gone for good.
    await asyncio.to_thread(proxy.destroy_toxic, "timeout_upstream")
    async with asyncio.timeout(WAIT_TIMEOUT):
        assert await reader.read() == b""
    reader, writer = await connect(proxy)
    await round_trip(reader, writer)                    # a new connection works


async def test_reset_peer_resets_the_client(toxiproxy, tcp_servers):
    proxy = await proxy_to(toxiproxy, await tcp_servers("echo"))
    await add(proxy, type="reset_peer", attributes={"timeout": 0})
    reader, writer = await connect(proxy)
    writer.write(b"hello")
    with pytest.raises(ConnectionResetError):
        async with asyncio.timeout(WAIT_TIMEOUT):
            await reader.read(100)


async def test_reset_peer_after_its_timeout(toxiproxy, tcp_servers):
    proxy = await proxy_to(toxiproxy, await tcp_servers("echo"))
    reader, writer = await connect(proxy)                      # opened before the toxic
    await add(proxy, type="reset_peer", stream="upstream", attributes={"timeout": 200})
    start = time.monotonic()
    writer.write(b"hello")
    with pytest.raises(ConnectionResetError):
        async with asyncio.timeout(WAIT_TIMEOUT):
            await reader.read(100)
    assert 0.2 <= time.monotonic() - start < 0.2 + SLACK


async def test_slicer_splits_writes(toxiproxy, tcp_servers):
    sink = await tcp_servers("sink")
    proxy = await proxy_to(toxiproxy, sink)
    await add(proxy, type="slicer", stream="upstream",
              attributes={"average_size": 10, "size_variation": 0, "delay": 50_000})
    _, writer = await connect(proxy)
    payload = bytes(range(40))
    writer.write(payload)                                      # one write of 40 bytes
    assert await sink.wait_received(40) == payload
    sizes = [len(data) for _, data in sink.reads]
    # Four slices of 10 bytes, 50 ms apart: reads may merge slices on a busy
    # machine, never split them off their boundaries.
    assert len(sizes) >= 2 and all(size % 10 == 0 for size in sizes), sizes
    assert sink.reads[-1][0] - sink.reads[0][0] >= 0.1


async def test_limit_data_closes_after_n_bytes(toxiproxy, tcp_servers):
    proxy = await proxy_to(toxiproxy, await tcp_servers("echo"))
    await add(proxy, type="limit_data", attributes={"bytes": 100})
    reader, writer = await connect(proxy)
    payload = os.urandom(150)
    writer.write(payload)
    async with asyncio.timeout(WAIT_TIMEOUT):
        assert await reader.read() == payload[:100]


async def test_disabled_proxy_drops_and_refuses(toxiproxy, tcp_servers):
    proxy = await proxy_to(toxiproxy, await tcp_servers("echo"))
    reader, writer = await connect(proxy)
    await asyncio.to_thread(proxy.disable)
    async with asyncio.timeout(WAIT_TIMEOUT):
        assert await reader.read() == b""
    with pytest.raises(ConnectionRefusedError):
        await connect(proxy)
    await asyncio.to_thread(proxy.enable)
    reader, writer = await connect(proxy)
    await round_trip(reader, writer)                    # enabled again: it works


async def test_bytes_survive_toxic_changes_on_a_live_connection(toxiproxy, tcp_servers):
    """Adding, updating and removing toxics mid-stream loses, duplicates or
    reorders nothing (toxics that do not drop by design)."""
    proxy = await proxy_to(toxiproxy, await tcp_servers("echo"))
    reader, writer = await connect(proxy)
    payload = os.urandom(400_000)

    async def send():
        for i in range(0, len(payload), 4000):
            writer.write(payload[i:i + 4000])
            await writer.drain()
            await asyncio.sleep(0.002)

    async def churn():
        await add(proxy, type="latency", stream="upstream", attributes={"latency": 30})
        await add(proxy, type="slicer", attributes={"average_size": 700, "size_variation": 300})
        await add(proxy, type="bandwidth", attributes={"rate": 2000})
        await asyncio.to_thread(proxy.update_toxic, "latency_upstream",
                                attributes={"latency": 5, "jitter": 5})
        await asyncio.to_thread(proxy.destroy_toxic, "slicer_downstream")
        await asyncio.to_thread(proxy.destroy_toxic, "latency_upstream")
        await asyncio.to_thread(proxy.destroy_toxic, "bandwidth_downstream")

    async def receive():
        return await reader.readexactly(len(payload))

    async with asyncio.timeout(WAIT_TIMEOUT):
        _, _, echoed = await asyncio.gather(send(), churn(), receive())
    assert echoed == payload


async def test_a_slow_link_pushes_back_on_the_sender(toxiproxy, tcp_servers):
    """The proxy stops reading when a few MB are held in a link, so a slow
    link slows the sender's writes (as TCP would) instead of buffering
    without bound."""
    proxy = await proxy_to(toxiproxy, await tcp_servers("sink"))
    await add(proxy, type="bandwidth", stream="upstream", attributes={"rate": 10})
    _, writer = await connect(proxy)
    sent, block = 0, b"x" * 65536

    async def push():
        nonlocal sent
        while True:
            writer.write(block)
            await writer.drain()
            sent += len(block)

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(1.5):
            await push()
    # Unbounded, loopback takes hundreds of MB/s; bounded: the proxy's 4 MB
    # plus the kernel's socket buffers.
    assert sent < 24_000_000, f"{sent / 1e6:.1f} MB accepted at 10 KB/s"
    writer.transport.abort()

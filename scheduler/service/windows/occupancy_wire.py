"""An occupancy push's speed (issue 21): a host's occupancy as the bytes of
the SchedulerMessage that carries it, each device's holders encoded once and
then kept up to date by what changed, instead of a protobuf Occupancy built
with every holder of every device for each push (agents.occupancy, the plain
twin this is tested against, tests/service/test_occupancy_wire.py).

A host's CPU packages are held by every claim with reserved CPU: a host
holding 25,000 such claims made each push build a 25,000-entry map per
package (8 ms at 50,000 entries) for a change of one. Here each holder's map
entry (`occupants`, a map<string, uint64>: on the wire one record per entry,
a tag and a length before the entry's key and value) is encoded once and
kept per host and device; a push re-encodes only the entries of the holders
that changed (pmap.changes between the holders last encoded and these, which
walks only what the two maps do not share: Holders makes each from the last
by copying a path per claim) and joins the kept records (a copy of bytes,
not a message built). A map's entries may come in any order; the agent reads
them into a map either way.

The wire format, protobuf's (agent.proto):
  SchedulerMessage.occupancy (2)   Occupancy
  Occupancy.version (1)            varint, left out when 0
  Occupancy.devices (2)            DeviceOccupancy, per device in order
  DeviceOccupancy.device_id (1)    string
  DeviceOccupancy.capacity (2)     varint, left out when 0
  DeviceOccupancy.occupants (3)    map entries: key (1) string, value (2) varint
"""

from __future__ import annotations

from collections.abc import Mapping

from protos.energy import MDEV_PER_DEVICE
from protos.pool.v1 import agent_pb2, types_pb2
from scheduler.kernel import ClusterState
from scheduler.kernel.fast.pmap import MISSING, PMap, changes
from scheduler.service.wire import LENGTH_DELIMITED, VARINT, delimited, tag, varint
from scheduler.service.windows.batch import CPU_PREFIX

_OCCUPANCY = tag(agent_pb2.SchedulerMessage, "occupancy", LENGTH_DELIMITED)
_VERSION = tag(agent_pb2.Occupancy, "version", VARINT)
_DEVICES = tag(agent_pb2.Occupancy, "devices", LENGTH_DELIMITED)
_DEVICE_ID = tag(agent_pb2.DeviceOccupancy, "device_id", LENGTH_DELIMITED)
_CAPACITY = tag(agent_pb2.DeviceOccupancy, "capacity", VARINT)
_OCCUPANTS = tag(agent_pb2.DeviceOccupancy, "occupants", LENGTH_DELIMITED)
_KEY, _VALUE = b"\x0a", b"\x10"   # a map entry's key (1, string) and value (2, varint)


_VARINTS = [varint(n) for n in range(1 << 14)]   # every weight and length up to 16,383, encoded once


def _entry(claim_key: str, weight: int) -> bytes:
    """One `occupants` record: the entry message, tagged and sized."""
    key = claim_key.encode()
    body = b"".join((_KEY, _VARINTS[len(key)], key, _VALUE,
                     _VARINTS[weight] if weight < len(_VARINTS) else varint(weight)))
    return b"".join((_OCCUPANTS, _VARINTS[len(body)], body))


BUCKETS = 256   # a device's records are kept in this many groups, each joined apart


class _Kept:
    """A device's `occupants` records, as last pushed, from `holders`: grouped
    by the claim key's hash, each group also joined, so a change re-joins its
    own group and then the groups (not every record)."""

    __slots__ = ("holders", "groups", "joined", "all")

    def __init__(self, holders: Mapping[str, int]) -> None:
        self.holders = holders
        self.groups: dict[int, dict[str, bytes]] = {}
        for claim_key, weight in holders.items():
            self.groups.setdefault(hash(claim_key) % BUCKETS, {})[claim_key] = _entry(claim_key, weight)
        self.joined = {group: b"".join(records.values()) for group, records in self.groups.items()}
        self.all = b"".join(self.joined.values())   # every group's records, joined

    def set(self, claim_key: str, weight: int | object) -> int:
        """The claim's record, or none (weight MISSING); its group's number."""
        group = hash(claim_key) % BUCKETS
        records = self.groups.setdefault(group, {})
        if weight is MISSING:
            del records[claim_key]
        else:
            records[claim_key] = _entry(claim_key, weight)
        return group

    def rejoin(self, groups: set[int]) -> bytes:
        for group in groups:
            if self.groups[group]:
                self.joined[group] = b"".join(self.groups[group].values())
            else:
                del self.groups[group], self.joined[group]
        return b"".join(self.joined.values())


class OccupancyWire:
    """Each host's occupancy pushes, as SchedulerMessage bytes, with each
    device's `occupants` records kept from the last push to the host, also
    across its streams (a reconnecting agent's first push costs what changed
    since its last, not a record per holder)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], _Kept] = {}

    def message(self, state: ClusterState, host: str, meters: list[types_pb2.DeviceMeter], version: int,
                held: Mapping[str, Mapping[str, int]]) -> bytes:
        """SchedulerMessage(occupancy=agents.occupancy(state, host, meters, version)),
        encoded; `held`: the host's occupants (Holders' answer)."""
        worker = state.workers[host]
        things = [(device.device_id, MDEV_PER_DEVICE, device.device_id) for device in worker.devices]
        things += [(meter.device_id, worker.cpu_millis, CPU_PREFIX) for meter in meters
                   if meter.kind == types_pb2.CPU_PACKAGE]
        parts = [_VERSION + varint(version)] if version else []
        for device_id, capacity, key in things:
            head = delimited(_DEVICE_ID, device_id.encode()) + (_CAPACITY + varint(capacity) if capacity else b"")
            occupants = self._occupants(host, key, held.get(key, {}))
            parts += (_DEVICES, varint(len(head) + len(occupants)), head, occupants)
        return b"".join([_OCCUPANCY, varint(sum(map(len, parts))), *parts])   # the records copied once

    def _occupants(self, host: str, key: str, holders: Mapping[str, int]) -> bytes:
        """The `occupants` records of a device now held by `holders`."""
        kept = self._kept.get((host, key))
        if kept is not None and kept.holders is holders:
            return kept.all
        if kept is None or type(kept.holders) is not PMap or type(holders) is not PMap:
            self._kept[host, key] = kept = _Kept(holders)
            return kept.all
        changed = {kept.set(claim_key, weight) for claim_key, _, weight in changes(kept.holders, holders)}
        kept.holders, kept.all = holders, kept.rejoin(changed)
        return kept.all

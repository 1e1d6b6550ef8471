"""Which network addresses the server may connect to for a user (webhooks, text-to-SQL databases).

OWASP's SSRF advice, as one policy: resolve the host, check every address it resolves to, then
connect to the checked address (the callers pin it), never to the name again. Public addresses are
open; loopback, private (RFC 1918), unique-local (fc00::/7), CGNAT and the like need the host named
by its exact name or an IP/CIDR entry of an allow-list; link-local, multicast, unspecified and
reserved ones need an IP/CIDR entry; a cloud metadata address (169.254.169.254 and its kin) an
entry naming that very address. IPv6 addresses that reach an IPv4 one through a translator or a
tunnel (IPv4-mapped, NAT64's 64:ff9b::/96, 6to4, Teredo, IPv4-compatible, SIIT) are judged as the IPv4
they carry, and connected to as given; NAT64's local-use prefix (64:ff9b:1::/48, where the IPv4 may sit
anywhere) needs an IP/CIDR entry. Hosts written as numbers (`2130706433`, `0x7f.1`, `0177.0.0.1`,
`127.1`) are names to the syntax and addresses to the resolver: what they resolve to is checked."""

import ipaddress
import socket
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA_ADDRESSES = {ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200")}
METADATA_HOSTS = {"metadata.google.internal", "metadata", "metadata.goog", "instance-data"}
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SIIT = ipaddress.ip_network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


class AddressRefused(Exception):
    pass


@dataclass(frozen=True)
class AllowList:
    names: frozenset[str]
    wildcards: tuple[str, ...]  # ".example.com" for "*.example.com"
    networks: tuple[IPNetwork, ...]

    @classmethod
    def parse(cls, entries: list[str]) -> "AllowList":
        names, wildcards, networks = set(), [], []
        for raw in entries:
            entry = raw.strip().lower().rstrip(".")
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
                continue
            except ValueError:
                pass
            if entry.startswith("*."):
                wildcards.append(entry[1:])
            else:
                names.add(entry)
        return cls(frozenset(names), tuple(wildcards), tuple(networks))

    def covers(self, address: IPAddress) -> bool:
        """An entry names the address, or the IPv4 address it carries."""
        carried = carried_ipv4(address)
        return any(address in net or (carried is not None and carried in net) for net in self.networks)

    def lists_name(self, host: str) -> bool:
        return host in self.names or any(host.endswith(w) for w in self.wildcards)


def carried_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one reaches through a translator or a tunnel, or None."""
    if address.version == 4:
        return None
    assert isinstance(address, ipaddress.IPv6Address)
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]  # the client behind the tunnel
    if address in _NAT64 or address in _SIIT or (address in _IPV4_COMPATIBLE and int(address) > 1):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def literal_address(host: str) -> IPAddress | None:
    try:
        address = ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _always_internal(address: IPAddress) -> bool:
    """Addresses no host may reach unless an IP/CIDR entry names them."""
    return (address in METADATA_ADDRESSES or address.is_link_local or address.is_multicast
            or address.is_unspecified or address.is_reserved)


def check_address(allow: AllowList, host: str, address: IPAddress) -> None:
    """Raises AddressRefused unless `host`, resolved to `address`, may be connected to."""
    carried = carried_ipv4(address)
    judged = carried if carried is not None else address  # an IPv6 form of an IPv4 address is that address
    what = f"{address} (which reaches {carried})" if carried is not None else str(address)
    if judged in METADATA_ADDRESSES:  # only an entry naming this very address opens it
        if not any(net.num_addresses == 1 and judged in net for net in allow.networks):
            raise AddressRefused(f"{host} resolves to {what}, a cloud metadata address")
        return
    if allow.covers(address):
        return
    if _always_internal(judged) or (carried is None and address in _NAT64_LOCAL):
        raise AddressRefused(f"{host} resolves to {what}, a link-local, metadata or reserved address")
    if not judged.is_global and host not in allow.names:
        raise AddressRefused(f"{host} resolves to the internal address {what}; list the host by its exact name "
                             "or its network to allow it")


def resolve_all(host: str, port: int | None) -> list[IPAddress]:
    """Every address `host` resolves to (a literal address is itself); blocking."""
    literal = literal_address(host)
    if literal is not None:
        return [literal]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise AddressRefused(f"{host} does not resolve: {exc}") from None
    addresses = [a for a in (literal_address(str(info[4][0])) for info in infos) if a is not None]
    if not addresses:
        raise AddressRefused(f"{host} does not resolve")
    return addresses


def checked_address(allow: AllowList, host: str, port: int | None) -> IPAddress:
    """The address to connect to for `host`: resolved, every address checked (a resolver may answer
    differently next time), the first one returned for the caller to pin. Blocking."""
    host = host.rstrip(".").lower()
    if host in METADATA_HOSTS:
        raise AddressRefused(f"{host} is a cloud metadata host")
    addresses = resolve_all(host, port)
    for address in addresses:
        check_address(allow, host, address)
    return addresses[0]

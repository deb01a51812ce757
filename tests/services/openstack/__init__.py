"""A minimal real OpenStack control plane for the tests (the `realnova` layer), from Debian
12's OpenStack Zed packages: its own MariaDB and RabbitMQ, keystone, placement, glance, nova
(api, conductor, scheduler, compute with the fake virt driver) and neutron (ML2 with the test
mechanism driver on a flat network), each a process of ours started and stopped by pid."""

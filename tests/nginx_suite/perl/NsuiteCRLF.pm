# NsuiteCRLF — loaded before Test::Nginx (PERL5OPT=-MNsuiteCRLF): the requests the suite
# writes with bare LF line ends leave with CRLF ones.
#
# The suite's files write request heads as here-documents, whose lines end in "\n" alone;
# nginx takes that, lfhttpd refuses it (a bare LF is how a request is smuggled past a
# front end that reads lines differently). Every request goes through Test::Nginx's
# http_start, so it is wrapped: in each request head of the string (a string may pipeline
# several) a bare "\n" becomes "\r\n"; a body, known by its Content-Length, is left as it
# is, and so is everything after a chunked head. The suite's lib directory is NSUITE_LIB.
package NsuiteCRLF;
use strict;
use warnings;

BEGIN { unshift @INC, $ENV{NSUITE_LIB} if $ENV{NSUITE_LIB}; }
use Test::Nginx ();

sub crlf_heads {
    my ($s) = @_;
    my $out = '';
    while (length $s) {
        # a head ends at the first empty line: "\n\n", "\r\n\r\n" or a mix
        if ($s !~ /\A(.*?\n\r?\n)/s) {
            $s =~ s/(?<!\r)\n/\r\n/g; # an unfinished head: its lines only
            return $out . $s;
        }
        my $head = $1;
        $s = substr($s, length $head);
        $head =~ s/(?<!\r)\n/\r\n/g;
        $out .= $head;
        if ($head =~ /^transfer-encoding:[^\r]*chunked/im) {
            return $out . $s;
        }
        my $len = $head =~ /^content-length:\s*(\d+)/im ? $1 : 0;
        $len = length $s if $len > length $s;
        $out .= substr($s, 0, $len);
        $s = substr($s, $len);
    }
    return $out;
}

{
    no warnings 'redefine';
    my $start = \&Test::Nginx::http_start;
    *Test::Nginx::http_start = sub ($;%) {
        my ($request, @extra) = @_;
        return $start->(crlf_heads($request), @extra);
    };
}

1;

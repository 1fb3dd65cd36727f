package dev.folio.interop;

import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.RackawareEnsemblePlacementPolicy;
import org.apache.bookkeeper.net.BookieId;

/**
 * The Java client's default placement (rack-aware; one default rack here), restricted to the bookies a test names in
 * {@link #allow}: the Java client then writes ledgers whose ensembles are, say, Java bookies only
 * on a cluster that also holds Folio bookies. Every other writable bookie is excluded from new
 * ensembles. With nothing allowed ({@code null}) it is the default policy.
 */
public class PinnedPlacementPolicy extends RackawareEnsemblePlacementPolicy {
    static volatile Set<BookieId> allowed;
    private volatile Set<BookieId> writable = new HashSet<>();

    static void allow(Set<String> ids) {
        Set<BookieId> s = new HashSet<>();
        for (String id : ids) {
            s.add(BookieId.parse(id));
        }
        allowed = s;
    }

    @Override
    public Set<BookieId> onClusterChanged(Set<BookieId> writableBookies, Set<BookieId> readOnlyBookies) {
        writable = new HashSet<>(writableBookies);
        return super.onClusterChanged(writableBookies, readOnlyBookies);
    }

    @Override
    public PlacementResult<List<BookieId>> newEnsemble(int ensembleSize, int quorumSize, int ackQuorumSize,
            Map<String, byte[]> customMetadata, Set<BookieId> excludeBookies)
            throws BKException.BKNotEnoughBookiesException {
        Set<BookieId> only = allowed;
        Set<BookieId> excluded = new HashSet<>(excludeBookies);
        if (only != null) {
            for (BookieId b : writable) {
                if (!only.contains(b)) {
                    excluded.add(b);
                }
            }
        }
        return super.newEnsemble(ensembleSize, quorumSize, ackQuorumSize, customMetadata, excluded);
    }
}
